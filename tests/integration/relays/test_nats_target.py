"""The NATS target against the JetStream server on this machine, read back with nats-py."""

import asyncio
import contextlib
import dataclasses
import logging
import shutil
import socket
import time
import uuid
from collections.abc import AsyncIterator, Callable

import nats
import nats.js.errors
import orjson
import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import DiscardPolicy, StorageType, StreamConfig

from outbox_relays import fields
from outbox_relays.kinds import open_target
from outbox_relays.nats_streams import DUPLICATE_WINDOW, stream_warnings
from outbox_relays.target import BrokerUnavailable, Target
from outbox_relays.target_url import RelayUrlError
from poller.message import Message
from tests.support.brokers import NATS, answers, require
from tests.support.relay_messages import made_messages, refusal

SERVER = "nats://127.0.0.1:4222"
SECRET = "Wr0ng-s3cret-pw"
RIGHT = "R1ght-s3cret-pw"


class Jet:
    """The test's own JetStream client, a unique subject prefix, and what a test made."""

    def __init__(self, nc: Client) -> None:
        self.nc = nc
        self.js: JetStreamContext = nc.jetstream()
        self.prefix = f"relaytest{uuid.uuid4().hex[:12]}"
        self.streams: list[str] = []
        self.targets: list[Target] = []

    def stream_name(self) -> str:
        name = f"RELAYTEST_{uuid.uuid4().hex[:12]}"
        self.streams.append(name)
        return name

    async def stream(self, max_msg_size: int | None = None) -> str:
        """A stream capturing every subject under this test's prefix."""
        name = self.stream_name()
        await self.js.add_stream(
            name=name,
            subjects=[f"{self.prefix}.>"],
            storage=StorageType.FILE,
            max_msg_size=max_msg_size,
        )
        return name

    def target(self, query: str, *, server: str = SERVER, declare: bool = False) -> Target:
        target = open_target(f"{server}?{query}", declare=declare)
        self.targets.append(target)
        return target

    async def held(self, stream: str) -> list[tuple[str, bytes, dict[str, str]]]:
        """(subject, body, headers) of every message the stream holds, in stream order."""
        count = (await self.js.stream_info(stream)).state.messages
        held = []
        for sequence in range(1, count + 1):
            stored = await self.js.get_msg(stream, sequence)
            assert stored.subject is not None
            assert stored.data is not None
            held.append((stored.subject, stored.data, dict(stored.headers or {})))
        return held


@pytest.fixture
async def jet() -> AsyncIterator[Jet]:
    require(NATS)
    nc = await nats.connect(SERVER)
    jet = Jet(nc)
    try:
        yield jet
    finally:
        for target in jet.targets:
            await target.close()
        for name in jet.streams:
            # A declare test may fail before its target created the stream.
            with contextlib.suppress(nats.js.errors.NotFoundError):
                await jet.js.delete_stream(name)
        await nc.close()


class Proxy:
    """A TCP relay to the NATS server that a test can cut, or make swallow what the server
    sends, the way a network fault would: nothing private of the client is touched."""

    def __init__(self) -> None:
        self.swallowing = False
        self._writers: list[asyncio.StreamWriter] = []
        self._server: asyncio.Server | None = None

    async def start(self) -> str:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        return f"nats://127.0.0.1:{port}"

    def cut(self) -> None:
        for writer in self._writers:
            writer.close()
        self._writers.clear()

    async def stop(self) -> None:
        self.cut()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _accept(self, client_in: asyncio.StreamReader, client: asyncio.StreamWriter) -> None:
        server_in, server = await asyncio.open_connection("127.0.0.1", 4222)
        self._writers += [client, server]
        await asyncio.gather(
            self._pipe(client_in, server, lambda: False),
            self._pipe(server_in, client, lambda: self.swallowing),
            return_exceptions=True,
        )

    @staticmethod
    async def _pipe(
        source: asyncio.StreamReader, sink: asyncio.StreamWriter, swallow: Callable[[], bool]
    ) -> None:
        while data := await source.read(65536):
            if not swallow():
                sink.write(data)
                await sink.drain()
        sink.close()


@pytest.fixture
async def proxy() -> AsyncIterator[Proxy]:
    proxy = Proxy()
    yield proxy
    await proxy.stop()


def expected(message: Message, subject: str) -> tuple[str, bytes, dict[str, str]]:
    headers = fields.header_fields(message)
    headers["Nats-Msg-Id"] = fields.dedup_id(message)
    return subject, fields.payload(message), headers


def padded(message: Message, size: int) -> Message:
    """`message` with a payload of more than `size` bytes."""
    return Message(
        position=message.position,
        transaction_id=message.transaction_id,
        publication=message.publication,
        message_id=message.message_id,
        message_type=message.message_type,
        partition_key=message.partition_key,
        data_text=orjson.dumps({"pad": "x" * size}).decode(),
        headers_text=message.headers_text,
        appended_at=message.appended_at,
    )


def batch(count: int = 50, first_transaction: int = 1000) -> list[Message]:
    """Keyed and keyless messages, with dotted message types."""
    half = count // 2
    return made_messages(half, first_transaction=first_transaction) + made_messages(
        count - half, key=None, first_transaction=first_transaction + half
    )


async def test_batch_is_stored_in_order_with_every_header(jet: Jet) -> None:
    stream = await jet.stream()
    target = jet.target(f"subject={jet.prefix}.{{publication}}.{{message_type}}")
    messages = batch()

    assert await target.publish(messages) == {}

    subject = f"{jet.prefix}.orders.order.placed"
    held = await jet.held(stream)
    assert held == [expected(message, subject) for message in messages]
    assert fields.PARTITION_KEY in held[0][2]
    assert fields.PARTITION_KEY not in held[-1][2]


async def test_republished_batch_is_stored_once(jet: Jet) -> None:
    stream = await jet.stream()
    subject = f"{jet.prefix}.out"
    target = jet.target(f"subject={subject}")
    first = batch()
    assert await target.publish(first) == {}
    # A relay that crashed before recording its progress: a new target, the same batch.
    await target.close()
    again = jet.target(f"subject={subject}")
    assert await again.publish(first) == {}
    assert (await jet.js.stream_info(stream)).state.messages == 50

    overlapping = first[25:] + batch(25, first_transaction=5000)
    assert await again.publish(overlapping) == {}

    held = await jet.held(stream)
    assert held == [expected(message, subject) for message in first + overlapping[25:]]


async def test_lost_acknowledgements_time_out_and_the_retry_stores_each_once(
    jet: Jet, proxy: Proxy
) -> None:
    stream = await jet.stream()
    subject = f"{jet.prefix}.out"
    target = jet.target(f"subject={subject}&timeout=0.5", server=await proxy.start())
    messages = batch()
    assert await target.publish(messages[:10]) == {}

    proxy.swallowing = True  # the server stores what comes, its acknowledgements are lost
    with pytest.raises(BrokerUnavailable) as raised:
        await target.publish(messages)
    assert raised.value.kind == "timeout"
    assert "50 of 50 messages unconfirmed after 0.5 s" in raised.value.reason
    assert (await jet.js.stream_info(stream)).state.messages == 50

    proxy.swallowing = False
    assert await target.publish(messages) == {}
    assert await jet.held(stream) == [expected(message, subject) for message in messages]


async def test_server_side_cut_is_followed_by_a_reconnect(jet: Jet, proxy: Proxy) -> None:
    stream = await jet.stream()
    subject = f"{jet.prefix}.out"
    target = jet.target(f"subject={subject}", server=await proxy.start())
    messages = batch(20)
    assert await target.publish(messages[:10]) == {}

    proxy.cut()
    await asyncio.sleep(0.2)  # the client reads the end of its connection

    assert await target.publish(messages[10:]) == {}
    assert await jet.held(stream) == [expected(message, subject) for message in messages]


async def test_missing_stream_is_named(jet: Jet) -> None:
    target = jet.target(f"subject={jet.prefix}.{{message_type}}")

    with pytest.raises(BrokerUnavailable) as raised:
        await target.publish(batch(3))

    assert raised.value.kind == "missing"
    assert raised.value.reason == (
        f"NATS: no JetStream stream captures subject '{jet.prefix}.order.placed' (create one,"
        " or run the relay with --declare)"
    )
    with pytest.raises(nats.js.errors.NotFoundError):
        await jet.js.find_stream_name_by_subject(f"{jet.prefix}.>")


async def test_declare_creates_a_stream_covering_the_template(jet: Jet) -> None:
    stream = jet.stream_name()
    query = f"subject={jet.prefix}.{{publication}}.{{message_type}}&stream={stream}"
    target = jet.target(query, declare=True)
    messages = batch()

    assert await target.publish(messages) == {}

    info = await jet.js.stream_info(stream)
    assert info.config.subjects == [f"{jet.prefix}.*.>"]
    assert info.config.storage == StorageType.FILE
    assert info.config.duplicate_window == DUPLICATE_WINDOW == 7200
    subject = f"{jet.prefix}.orders.order.placed"
    assert await jet.held(stream) == [expected(message, subject) for message in messages]
    # A second relay declaring the same finds the stream and leaves it as it is.
    again = jet.target(query, declare=True)
    assert await again.publish(messages) == {}
    assert (await jet.js.stream_info(stream)).state.messages == 50


async def test_declare_names_a_stream_it_cannot_create(jet: Jet) -> None:
    stream = await jet.stream()  # holds the name, with other subjects
    target = jet.target(f"subject=other{jet.prefix}.{{message_type}}&stream={stream}", declare=True)

    with pytest.raises(BrokerUnavailable) as raised:
        await target.publish(batch(1))

    assert raised.value.kind == "missing"
    assert f"stream '{stream}' captures none of 'other{jet.prefix}.>'" in raised.value.reason
    assert "--declare" not in raised.value.reason  # it runs with it


async def test_messages_it_can_never_take_are_refused_for_good(jet: Jet) -> None:
    stream = await jet.stream(max_msg_size=400)
    target = jet.target(f"subject={jet.prefix}.k.{{partition_key}}")
    small, big, keyless, after = made_messages(4)
    big = padded(big, 500)
    keyless = made_messages(1, key=None, first_transaction=keyless.transaction_id)[0]

    refused = await target.publish([small, big, keyless, after])

    assert set(refused) == {big.at, keyless.at}
    assert "message size exceeds maximum allowed (JetStream error 10054)" in refusal(
        refused[big.at]
    )
    assert "has an empty token" in refusal(refused[keyless.at])
    subject = f"{jet.prefix}.k.k"
    assert await jet.held(stream) == [expected(small, subject), expected(after, subject)]


async def test_sealed_stream_is_a_server_error(jet: Jet) -> None:
    stream = await jet.stream()
    config = (await jet.js.stream_info(stream)).config
    await jet.js.update_stream(config, sealed=True)
    target = jet.target(f"subject={jet.prefix}.out")

    with pytest.raises(BrokerUnavailable) as raised:
        await target.publish(batch(2))

    assert raised.value.kind == "server_error"
    assert f"subject '{jet.prefix}.out'" in raised.value.reason


@pytest.fixture
async def guarded_server() -> AsyncIterator[str]:
    """A NATS server of the test's own (no JetStream) that lets in only relay:RIGHT."""
    binary = shutil.which("nats-server")
    if binary is None:
        pytest.skip("nats-server is not installed")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = await asyncio.create_subprocess_exec(
        *(binary, "-a", "127.0.0.1", "-p", str(port), "--user", "relay", "--pass", RIGHT),
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 5
        while not answers("127.0.0.1", port):
            assert time.monotonic() < deadline, "the test's nats-server did not start"
            await asyncio.sleep(0.05)
        yield f"127.0.0.1:{port}"
    finally:
        server.terminate()
        await server.wait()


async def test_wrong_password_is_refused_without_showing_it(guarded_server: str) -> None:
    wrong = open_target(f"nats://relay:{SECRET}@{guarded_server}?subject=orders.out")
    right = open_target(f"nats://relay:{RIGHT}@{guarded_server}?subject=orders.out")

    with pytest.raises(BrokerUnavailable) as refused:
        await wrong.publish(batch(1))
    # Let in, the publish finds no stream: this server has no JetStream.
    with pytest.raises(BrokerUnavailable) as let_in:
        await right.publish(batch(1))

    assert refused.value.kind == "refused"
    assert SECRET not in refused.value.reason
    assert "refused the login" in refused.value.reason
    assert let_in.value.kind == "missing"
    assert f"NATS nats://{guarded_server} has no JetStream" in let_in.value.reason
    await wrong.close()
    await right.close()


@pytest.mark.parametrize(
    ("query", "complaint"),
    [
        ("stream=S", "the parameter subject= is required"),
        ("subjet=orders.x", "unknown parameter 'subjet'"),
        ("subject=orders.{nope}", "names {nope}"),
        ("subject=orders..{message_type}", "has an empty token"),
        ("subject=orders.*", "has a wildcard token"),
        ("subject=orders.x&stream=A.B", "stream='A.B' is not a stream name"),
        ("subject=orders.x&timeout=0", "timeout='0' must be a number from 0.1 to 600"),
    ],
)
def test_bad_url_is_refused(query: str, complaint: str) -> None:
    with pytest.raises(RelayUrlError) as raised:
        open_target(f"nats://relay:{SECRET}@127.0.0.1:4222?{query}")

    assert complaint in str(raised.value)
    assert SECRET not in str(raised.value)


async def test_a_subject_the_declared_stream_cannot_capture_parks_that_message_only(
    jet: Jet,
) -> None:
    stream = jet.stream_name()
    query = f"subject={jet.prefix}.{{partition_key}}.created&stream={stream}"
    target = jet.target(query, declare=True)
    a = made_messages(1, key="a")
    dotted = made_messages(1, key="customer.7", first_transaction=2000)
    b = made_messages(1, key="b", first_transaction=3000)

    unsent = await target.publish(a + dotted + b)

    assert list(unsent) == [dotted[0].at]
    reason = unsent[dotted[0].at]
    assert isinstance(reason, str)
    assert f"does not capture subject '{jet.prefix}.customer.7.created'" in reason
    assert [subject for subject, _, _ in await jet.held(stream)] == [
        f"{jet.prefix}.a.created",
        f"{jet.prefix}.b.created",
    ]


async def test_a_service_answering_on_a_subject_parks_that_message_only(jet: Jet) -> None:
    stream = await jet.stream()  # captures prefix.>
    service = await jet.nc.subscribe(f"svc{jet.prefix}.orders", cb=answer_ok)
    target = jet.target("subject={partition_key}.orders")
    stored = made_messages(1, key=jet.prefix)
    answered = made_messages(1, key=f"svc{jet.prefix}", first_transaction=2000)

    unsent = await target.publish(stored + answered)
    await service.unsubscribe()

    assert list(unsent) == [answered[0].at]
    assert "something other than a JetStream stream answers" in str(unsent[answered[0].at])
    assert len(await jet.held(stream)) == 1


async def answer_ok(message: Msg) -> None:
    await message.respond(b"ok")


async def test_declare_declares_again_a_stream_deleted_while_the_relay_runs(jet: Jet) -> None:
    stream = jet.stream_name()
    target = jet.target(f"subject={jet.prefix}.{{message_type}}&stream={stream}", declare=True)
    first, second = batch(10)[:5], batch(10)[5:]
    assert await target.publish(first) == {}
    await jet.js.delete_stream(stream)

    with pytest.raises(BrokerUnavailable) as raised:
        await target.publish(second)  # the missing answer: declared again at the next attempt
    assert "it is declared again at the next attempt" in raised.value.reason
    assert "run the relay with --declare" not in raised.value.reason
    assert await target.publish(second) == {}
    assert len(await jet.held(stream)) == 5


async def test_settings_that_cannot_keep_exactly_once_are_warned_about_at_connect(
    jet: Jet, caplog: pytest.LogCaptureFixture
) -> None:
    stream = jet.stream_name()
    await jet.js.add_stream(
        name=stream, subjects=[f"{jet.prefix}.>"], storage=StorageType.MEMORY, duplicate_window=120
    )
    target = jet.target(f"subject={jet.prefix}.out", declare=True)  # stream= is OUTBOX

    with caplog.at_level(logging.WARNING, logger="outbox_relays.nats_streams"):
        assert await target.publish(batch(2)) == {}
        assert await target.publish(batch(2, first_transaction=3000)) == {}

    warnings = [record.getMessage() for record in caplog.records]
    assert len(warnings) == 3, warnings  # once each, not once per batch
    assert f"stream '{stream}' captures '{jet.prefix}.out', not stream='OUTBOX'" in warnings[0]
    assert "remembers Msg-Ids for 120 s (duplicate_window)" in warnings[1]
    assert "keeps its messages in memory" in warnings[2]


def test_a_stream_that_discards_new_messages_at_a_limit_is_warned_about() -> None:
    config = StreamConfig(
        name="S", subjects=["s.>"], duplicate_window=7200, discard=DiscardPolicy.NEW, max_msgs=10
    )
    (warning,) = stream_warnings(config, "S", "s.>")
    assert "discards new messages at its limits" in warning
    assert stream_warnings(dataclasses.replace(config, max_msgs=None), "S", "s.>") == []
