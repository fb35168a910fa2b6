"""The RabbitMQ target against the RabbitMQ server on this machine, read back with aio-pika."""

import asyncio
import shutil
import time
import uuid
from collections.abc import AsyncIterator

import aio_pika
import aio_pika.abc
import aiormq
import orjson
import pytest
from pamqp import commands
from pamqp.common import Arguments

from outbox_relays import amqp_batches, fields
from outbox_relays.kinds import open_target
from outbox_relays.target import BrokerUnavailable, Target
from outbox_relays.target_url import RelayUrlError
from poller.message import Message
from tests.support.brokers import RABBITMQ, require
from tests.support.relay_messages import made_messages, refusal

SERVER = "amqp://guest:guest@127.0.0.1:5672"
SECRET = "Wr0ng-s3cret-pw"


class Rabbit:
    """The test's own connection to RabbitMQ, and everything a test made, to remove after."""

    def __init__(self, connection: aio_pika.abc.AbstractConnection) -> None:
        self.connection = connection
        self.exchanges: list[str] = []
        self.queues: list[str] = []
        self.targets: list[Target] = []

    def name(self, what: str) -> str:
        return f"relay-test-{what}-{uuid.uuid4().hex[:12]}"

    def target(self, url: str, *, declare: bool = False) -> Target:
        target = open_target(url, declare=declare)
        self.targets.append(target)
        return target

    async def exchange(self) -> str:
        return await self.exchange_named(self.name("exchange"))

    async def exchange_named(self, name: str) -> str:
        self.exchanges.append(name)
        async with self.connection.channel() as channel:
            await channel.declare_exchange(name, aio_pika.ExchangeType.TOPIC)
        return name

    async def queue(self, exchange: str = "", arguments: Arguments = None) -> str:
        """A queue, bound to `exchange` for every routing key unless that is the default."""
        name = self.name("queue")
        self.queues.append(name)
        async with self.connection.channel() as channel:
            queue = await channel.declare_queue(name, arguments=arguments)
            if exchange:
                await queue.bind(exchange, "#")
        return name

    async def read(self, queue_name: str) -> list[aio_pika.abc.AbstractIncomingMessage]:
        """Everything the queue holds, in its order (a confirmed message is already there)."""
        received = []
        async with self.connection.channel() as channel:
            queue = await channel.get_queue(queue_name)
            while (message := await queue.get(no_ack=True, fail=False)) is not None:
                received.append(message)
        return received

    async def exists(self, exchange: str) -> bool:
        try:
            async with self.connection.channel() as channel:
                await channel.get_exchange(exchange)
        except aio_pika.exceptions.ChannelNotFoundEntity:
            return False
        return True


@pytest.fixture
async def rabbit() -> AsyncIterator[Rabbit]:
    require(RABBITMQ)
    connection = await aio_pika.connect(SERVER + "/")
    made = Rabbit(connection)
    yield made
    for target in made.targets:
        await target.close()
    async with connection.channel() as channel:
        for queue in made.queues:
            await channel.queue_delete(queue)
        for exchange in made.exchanges:
            await channel.exchange_delete(exchange)
    await connection.close()


class Proxy:
    """A TCP hop in front of RabbitMQ that the test can cut (the server dropping the
    connection) or hold (a broker that stops answering: nothing reaches the client)."""

    def __init__(self) -> None:
        self.held = False
        self.port = 0
        self._writers: list[asyncio.StreamWriter] = []
        self._server: asyncio.Server | None = None

    async def __aenter__(self) -> "Proxy":
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *_: object) -> None:
        self.cut()
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()

    def cut(self) -> None:
        for writer in self._writers:
            writer.transport.abort()
        self._writers.clear()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        server_reader, server_writer = await asyncio.open_connection("127.0.0.1", 5672)
        self._writers += [writer, server_writer]
        await asyncio.gather(
            self._pipe(reader, server_writer, to_client=False),
            self._pipe(server_reader, writer, to_client=True),
            return_exceptions=True,
        )

    async def _pipe(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, to_client: bool
    ) -> None:
        while data := await reader.read(65536):
            if not (to_client and self.held):
                writer.write(data)
                await writer.drain()
        writer.transport.abort()


def mixed_batch(count: int) -> list[Message]:
    """Half with a partition key, half without, in delivery order."""
    half = count // 2
    return made_messages(half) + made_messages(count - half, key=None, first_transaction=5000)


def with_data(message: Message, data_text: str) -> Message:
    return Message(
        position=message.position,
        transaction_id=message.transaction_id,
        publication=message.publication,
        message_id=message.message_id,
        message_type=message.message_type,
        partition_key=message.partition_key,
        data_text=data_text,
        headers_text=message.headers_text,
        appended_at=message.appended_at,
    )


def assert_carries(received: aio_pika.abc.AbstractIncomingMessage, sent: Message) -> None:
    assert received.body == sent.data_text.encode()
    assert received.message_id == fields.message_id(sent)
    assert received.type == sent.message_type
    assert received.timestamp == sent.appended_at.replace(microsecond=0)
    assert received.content_type == "application/json"
    assert received.delivery_mode == aio_pika.DeliveryMode.PERSISTENT
    # The outbox fields are text headers: one of another type would be missing here.
    text = {name: value for name, value in received.headers.items() if isinstance(value, str)}
    assert fields.read_header_fields(text) == fields.metadata(sent)
    assert fields.read_application_headers(received.headers) == sent.headers


async def test_batch_read_back_in_order_with_every_property(rabbit: Rabbit) -> None:
    exchange = await rabbit.exchange()
    queue = await rabbit.queue(exchange)
    target = rabbit.target(f"{SERVER}/%2F?exchange={exchange}&routing_key=orders.{{message_type}}")
    messages = mixed_batch(50)

    assert await target.publish(messages) == {}

    received = await rabbit.read(queue)
    assert [orjson.loads(m.body)["n"] for m in received] == [m.data["n"] for m in messages]
    for got, sent in zip(received, messages, strict=True):
        assert_carries(got, sent)
        assert got.exchange == exchange
        assert got.routing_key == "orders.order.placed"
    assert fields.PARTITION_KEY in received[0].headers
    assert fields.PARTITION_KEY not in received[-1].headers


async def test_republished_batch_arrives_again_with_the_same_message_ids(
    rabbit: Rabbit,
) -> None:
    """No broker de-duplication: at-least-once, and the consumer drops by message_id."""
    exchange = await rabbit.exchange()
    queue = await rabbit.queue(exchange)
    url = f"{SERVER}/?exchange={exchange}"
    messages = made_messages(5)
    target = rabbit.target(url)
    await target.publish(messages)
    await target.close()

    # The relay crashed before recording the batch as published: a new process sends it again.
    assert await rabbit.target(url).publish(messages) == {}
    # A closed target reconnects, and it too sends what it is given.
    assert await target.publish(messages) == {}

    ids = [fields.message_id(m) for m in messages]
    assert [m.message_id for m in await rabbit.read(queue)] == ids * 3


async def test_missing_exchange_is_missing_naming_it(rabbit: Rabbit) -> None:
    exchange = rabbit.name("absent")
    target = rabbit.target(f"{SERVER}/?exchange={exchange}")

    with pytest.raises(BrokerUnavailable) as raised:
        await target.publish(made_messages(3))

    assert raised.value.kind == "missing"
    assert f"exchange '{exchange}' does not exist" in raised.value.reason
    assert not await rabbit.exists(exchange)


async def test_an_exchange_deleted_while_in_use_is_missing_until_it_is_back(
    rabbit: Rabbit,
) -> None:
    exchange = await rabbit.exchange()
    target = rabbit.target(f"{SERVER}/?exchange={exchange}")
    await rabbit.queue(exchange)
    await target.publish(made_messages(1))
    async with rabbit.connection.channel() as channel:
        await channel.exchange_delete(exchange)

    # The server closes the channel over the publish, then the check on the new one fails.
    for _ in range(2):
        with pytest.raises(BrokerUnavailable) as raised:
            await target.publish(made_messages(1))
        assert raised.value.kind == "missing"
        assert f"exchange '{exchange}' does not exist" in raised.value.reason

    queue = await rabbit.queue(await rabbit.exchange_named(exchange))
    assert await target.publish(made_messages(2)) == {}
    assert len(await rabbit.read(queue)) == 2


async def test_missing_queue_without_declare_is_missing_naming_it(rabbit: Rabbit) -> None:
    exchange = await rabbit.exchange()
    queue = rabbit.name("absent")
    target = rabbit.target(f"{SERVER}/?exchange={exchange}&queue={queue}")

    with pytest.raises(BrokerUnavailable) as raised:
        await target.publish(made_messages(1))

    assert raised.value.kind == "missing"
    assert f"queue '{queue}' does not exist" in raised.value.reason


async def test_exchange_without_a_bound_queue_is_missing_then_delivers_once_bound(
    rabbit: Rabbit,
) -> None:
    exchange = await rabbit.exchange()
    target = rabbit.target(f"{SERVER}/?exchange={exchange}")
    messages = made_messages(3)

    with pytest.raises(BrokerUnavailable) as raised:
        await target.publish(messages)

    assert raised.value.kind == "missing"
    assert raised.value.reason == (
        f"RabbitMQ: no queue is bound to exchange '{exchange}' for routing key 'order.placed'"
        " (bind one, or run the relay with --declare and queue=)"
    )
    queue = await rabbit.queue(exchange)
    assert await target.publish(messages) == {}
    assert [m.message_id for m in await rabbit.read(queue)] == [m.message_id for m in messages]


async def test_declare_creates_a_durable_topic_exchange_and_bound_queue(rabbit: Rabbit) -> None:
    exchange, queue = rabbit.name("declared"), rabbit.name("declared")
    rabbit.exchanges.append(exchange)
    rabbit.queues.append(queue)
    target = rabbit.target(
        f"{SERVER}/?exchange={exchange}&queue={queue}&routing_key={{publication}}.{{message_type}}",
        declare=True,
    )
    messages = made_messages(5)

    assert await target.publish(messages) == {}

    received = await rabbit.read(queue)
    assert [m.routing_key for m in received] == ["orders.order.placed"] * 5
    for got, sent in zip(received, messages, strict=True):
        assert_carries(got, sent)
    # A declaration that differs from what exists is refused, so these check type and durability.
    async with rabbit.connection.channel() as channel:
        await channel.declare_exchange(exchange, aio_pika.ExchangeType.TOPIC, durable=True)
        await channel.declare_queue(queue, durable=True)


async def test_default_exchange_routes_to_the_queue_named_by_the_routing_key(
    rabbit: Rabbit,
) -> None:
    queue = await rabbit.queue()
    messages = made_messages(3)

    assert await rabbit.target(f"{SERVER}/?routing_key={queue}").publish(messages) == {}

    received = await rabbit.read(queue)
    assert [m.message_id for m in received] == [m.message_id for m in messages]
    assert {m.exchange for m in received} == {""}


async def test_declare_with_a_queue_on_the_default_exchange_routes_by_its_name(
    rabbit: Rabbit,
) -> None:
    queue = rabbit.name("declared")
    rabbit.queues.append(queue)
    messages = made_messages(3)

    target = rabbit.target(f"{SERVER}/?queue={queue}", declare=True)
    assert await target.publish(messages) == {}

    assert [m.message_id for m in await rabbit.read(queue)] == [m.message_id for m in messages]


async def test_default_exchange_without_the_queue_is_missing_naming_it(rabbit: Rabbit) -> None:
    queue = rabbit.name("absent")

    with pytest.raises(BrokerUnavailable) as raised:
        await rabbit.target(f"{SERVER}/?routing_key={queue}").publish(made_messages(1))

    assert raised.value.kind == "missing"
    assert f"no queue named '{queue}'" in raised.value.reason


async def test_a_full_queue_nacks_only_what_it_refused_and_nothing_confirmed_goes_again(
    rabbit: Rabbit,
) -> None:
    queue = await rabbit.queue(arguments={"x-max-length": 3, "x-overflow": "reject-publish"})
    target = rabbit.target(f"{SERVER}/?routing_key={queue}")
    messages = made_messages(10)
    pending, received = messages, []
    for _ in range(len(messages)):
        unsent = await target.publish(pending)
        for answer in unsent.values():
            assert isinstance(answer, BrokerUnavailable)
            assert answer.kind == "refused"
            assert "nacked" in answer.reason
        assert len(unsent) == len(pending) - 3 or not unsent
        pending = [message for message in pending if message.at in unsent]
        received += await rabbit.read(queue)  # the consumer frees the room
        if not pending:
            break
    assert [m.message_id for m in received] == [m.message_id for m in messages]


async def test_an_overlong_message_type_is_refused_for_good_and_the_rest_delivered(
    rabbit: Rabbit,
) -> None:
    exchange = await rabbit.exchange()
    queue = await rabbit.queue(exchange)
    good = made_messages(2)
    bad = made_messages(1, message_type="t" * 300, first_transaction=3000)
    target = rabbit.target(f"{SERVER}/?exchange={exchange}&routing_key=orders")

    refused = await target.publish([good[0], *bad, good[1]])

    assert list(refused) == [bad[0].at]
    assert "type" in refusal(refused[bad[0].at])
    assert [m.message_id for m in await rabbit.read(queue)] == [m.message_id for m in good]


async def test_only_the_returned_messages_of_a_batch_are_missing(rabbit: Rabbit) -> None:
    """One write carries the batch; each message keeps its own answer: the broker's returns
    name theirs by message_id, the rest are confirmed and never sent again."""
    exchange = await rabbit.exchange()
    queue = rabbit.name("queue")
    rabbit.queues.append(queue)
    async with rabbit.connection.channel() as channel:
        declared = await channel.declare_queue(queue)
        await declared.bind(exchange, "order.#")
    placed = made_messages(4)
    cancelled = made_messages(2, message_type="refund.issued", first_transaction=4000)
    batch = [placed[0], cancelled[0], placed[1], placed[2], cancelled[1], placed[3]]
    target = rabbit.target(f"{SERVER}/?exchange={exchange}")

    unsent = await target.publish(batch)

    assert sorted(unsent) == sorted(m.at for m in cancelled)
    for answer in unsent.values():
        assert isinstance(answer, BrokerUnavailable)
        assert answer.kind == "missing"
        assert "refund.issued" in answer.reason
    assert [m.message_id for m in await rabbit.read(queue)] == [m.message_id for m in placed]


async def test_a_body_larger_than_a_frame_arrives_whole_and_in_its_place(rabbit: Rabbit) -> None:
    """AMQP cuts a body at the connection's frame size (128 KiB by default): the pieces of
    the big one go out in the batch's one write between its neighbours'."""
    exchange = await rabbit.exchange()
    queue = await rabbit.queue(exchange)
    messages = made_messages(3)
    big = with_data(messages[1], orjson.dumps({"blob": "é" * 200_000}).decode())
    batch = [messages[0], big, messages[2]]
    target = rabbit.target(f"{SERVER}/?exchange={exchange}")

    assert await target.publish(batch) == {}

    received = await rabbit.read(queue)
    assert [m.message_id for m in received] == [fields.message_id(m) for m in batch]
    assert received[1].body == big.data_text.encode()
    assert len(received[1].body) > 3 * 131_072


async def test_a_batch_that_cannot_be_marshalled_gives_its_delivery_tags_back(
    rabbit: Rabbit,
) -> None:
    """Nothing of it reached the broker, so the channel's numbering stays the broker's: the
    next batch's confirms answer that batch's messages."""
    exchange = await rabbit.exchange()
    queue = await rabbit.queue(exchange)

    def batch(first: int, exchange: str) -> list[amqp_batches.Publish]:
        return [
            amqp_batches.Publish(
                exchange,
                "any",
                commands.Basic.Properties(message_id=f"m-{n}", delivery_mode=2),
                b"{}",
            )
            for n in range(first, first + 3)
        ]

    async with rabbit.connection.channel(publisher_confirms=True) as channel:
        frames = await channel.get_underlay_channel()
        assert isinstance(frames, aiormq.Channel)
        before = frames.delivery_tag
        with pytest.raises(ValueError, match="exchange"):
            await amqp_batches.publish(frames, [*batch(0, exchange), *batch(3, "x" * 300)])
        assert frames.delivery_tag == before
        assert not frames.confirmations

        confirmations = await amqp_batches.publish(frames, batch(6, exchange))
        async with asyncio.timeout(10):
            answers = await asyncio.gather(*confirmations)
    assert all(isinstance(answer, commands.Basic.Ack) for answer in answers)
    assert [m.message_id for m in await rabbit.read(queue)] == ["m-6", "m-7", "m-8"]


async def rabbitmqctl_eval(expression: str) -> str:
    process = await asyncio.create_subprocess_exec(
        "rabbitmqctl",
        "eval",
        expression,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, _ = await process.communicate()
    if process.returncode != 0:
        pytest.skip("rabbitmqctl cannot reach the RabbitMQ node")
    return out.decode().strip()


async def test_a_message_over_the_brokers_size_limit_is_refused_for_good(rabbit: Rabbit) -> None:
    """The broker closes the channel over it; the target learns the limit from the reason,
    parks that message, and publishes the rest of the batch again."""
    if shutil.which("rabbitmqctl") is None:
        pytest.skip("rabbitmqctl is not installed")
    exchange = await rabbit.exchange()
    queue = await rabbit.queue(exchange)
    messages = made_messages(4)
    big = with_data(messages[1], orjson.dumps({"blob": "x" * 5000}).decode())
    batch = [messages[0], big, messages[2], messages[3]]
    before = await rabbitmqctl_eval("application:get_env(rabbit, max_message_size).")
    assert before.startswith("{ok,")
    # Channels read the limit when they open: only the target's, opened below, sees this one.
    await rabbitmqctl_eval("application:set_env(rabbit, max_message_size, 4096).")
    try:
        target = rabbit.target(f"{SERVER}/?exchange={exchange}")
        await target.publish(made_messages(1, first_transaction=9000))
    finally:
        await rabbitmqctl_eval(f"application:set_env(rabbit, max_message_size, {before[4:-1]}).")

    refused = await target.publish(batch)

    assert list(refused) == [big.at]
    assert "max_message_size 4096" in refusal(refused[big.at])
    first, _, third, fourth = (m.message_id for m in batch)
    # The first is sent again only if its confirm was lost with the channel (at-least-once).
    assert [m.message_id for m in await rabbit.read(queue)] in (
        ["orders-9000-1", first, third, fourth],
        ["orders-9000-1", first, first, third, fourth],
    )


@pytest.mark.parametrize(
    ("query", "named"),
    [
        ("?exchange={nope}", "{nope}"),
        ("?routing_key={message_type", "routing_key="),
        ("?timeout=0", "timeout='0'"),
        ("?timeout=soon", "timeout='soon'"),
        ("?queue=", "queue="),
        ("?subject=x", "'subject'"),
        ("?exchange=a&exchange=b", "'exchange' is given twice"),
    ],
)
def test_bad_urls_are_refused_at_start(query: str, named: str) -> None:
    with pytest.raises(RelayUrlError) as raised:
        open_target(f"amqp://guest:{SECRET}@127.0.0.1:5672/{query}")

    assert named in str(raised.value)
    assert SECRET not in str(raised.value)


def test_a_vhost_of_more_than_one_path_segment_is_refused() -> None:
    with pytest.raises(RelayUrlError, match="must be one path segment"):
        open_target(f"amqp://guest:{SECRET}@127.0.0.1/a/b?exchange=x")


async def test_wrong_password_is_refused_without_the_password(rabbit: Rabbit) -> None:
    target = rabbit.target(f"amqp://guest:{SECRET}@127.0.0.1:5672/?exchange=x")

    with pytest.raises(BrokerUnavailable) as raised:
        await target.publish(made_messages(1))

    assert raised.value.kind == "refused"
    assert "refused the login (check the user name and password)" in raised.value.reason
    assert SECRET not in raised.value.reason


async def test_missing_vhost_is_missing_naming_it(rabbit: Rabbit) -> None:
    vhost = rabbit.name("vhost")

    with pytest.raises(BrokerUnavailable) as raised:
        await rabbit.target(f"{SERVER}/{vhost}?exchange=x").publish(made_messages(1))

    assert raised.value.kind == "missing"
    assert f"virtual host '{vhost}'" in raised.value.reason


async def test_a_dropped_connection_is_reopened_by_the_next_publish(rabbit: Rabbit) -> None:
    exchange = await rabbit.exchange()
    queue = await rabbit.queue(exchange)
    first, second = made_messages(2), made_messages(2, first_transaction=2000)
    async with Proxy() as proxy:
        target = rabbit.target(f"amqp://guest:guest@127.0.0.1:{proxy.port}/?exchange={exchange}")
        await target.publish(first)

        proxy.cut()
        await asyncio.sleep(0.2)  # the client reads the end of its connection

        # On a loaded machine the client may not have read it yet: one "connection" failure.
        failures = []
        for _ in range(2):
            try:
                assert await target.publish(second) == {}
                break
            except BrokerUnavailable as error:
                failures.append(error.kind)
        assert failures in ([], ["connection"])
    assert [m.message_id for m in await rabbit.read(queue)] == [
        m.message_id for m in first + second
    ]


async def test_a_connection_lost_mid_batch_is_a_connection_failure(rabbit: Rabbit) -> None:
    exchange = await rabbit.exchange()
    queue = await rabbit.queue(exchange)
    messages = made_messages(3)
    async with Proxy() as proxy:
        target = rabbit.target(f"amqp://guest:guest@127.0.0.1:{proxy.port}/?exchange={exchange}")
        await target.publish(made_messages(1, first_transaction=9000))
        proxy.held = True  # the confirms of the next batch never arrive
        publishing = asyncio.create_task(target.publish(messages))
        await asyncio.sleep(0.3)

        proxy.cut()
        with pytest.raises(BrokerUnavailable) as raised:
            await publishing

        assert raised.value.kind == "connection"
        proxy.held = False
        assert await target.publish(messages) == {}
    ids = [m.message_id for m in await rabbit.read(queue)]
    # The broker had the lost batch: sent again, it arrives twice (at-least-once).
    assert ids == ["orders-9000-1"] + [m.message_id for m in messages] * 2


async def test_unconfirmed_batch_times_out(rabbit: Rabbit) -> None:
    exchange = await rabbit.exchange()
    queue = await rabbit.queue(exchange)
    messages = made_messages(3)
    async with Proxy() as proxy:
        url = f"amqp://guest:guest@127.0.0.1:{proxy.port}/?exchange={exchange}&timeout=0.5"
        target = rabbit.target(url)
        await target.publish(made_messages(1, first_transaction=9000))
        proxy.held = True
        started = time.monotonic()

        with pytest.raises(BrokerUnavailable) as raised:
            await target.publish(messages)

        assert raised.value.kind == "timeout"
        assert "within 0.5s" in raised.value.reason
        assert time.monotonic() - started < 2.5
        proxy.held = False
        assert await target.publish(messages) == {}
    assert len(await rabbit.read(queue)) == 7


async def test_declare_declares_again_a_queue_deleted_while_the_relay_runs(rabbit: Rabbit) -> None:
    exchange, queue = rabbit.name("exchange"), rabbit.name("queue")
    rabbit.exchanges.append(exchange)
    rabbit.queues.append(queue)
    target = rabbit.target(f"{SERVER}/?exchange={exchange}&queue={queue}", declare=True)
    first, second = made_messages(6)[:3], made_messages(6)[3:]
    assert await target.publish(first) == {}
    async with rabbit.connection.channel() as channel:
        await channel.queue_delete(queue)

    with pytest.raises(BrokerUnavailable) as raised:
        await target.publish(second)  # returned: no queue bound any more
    assert raised.value.kind == "missing"
    assert "it is declared again at the next attempt" in raised.value.reason
    assert await target.publish(second) == {}
    assert [m.message_id for m in await rabbit.read(queue)] == [m.message_id for m in second]
