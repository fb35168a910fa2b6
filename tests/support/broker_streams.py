"""One relay destination per broker for the relay acceptance tests: made before the relay
starts (the relay creates nothing without --declare), read back as a consumer would, removed
after. Each entry read back is (position "tx:pos", partition key, message id), in the order
the broker holds them."""

import asyncio
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

import aio_pika
import nats
import redis
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy, StreamConfig

from outbox_relays import fields
from tests.support.brokers import NATS, RABBITMQ, REDIS

Entry = tuple[str, str | None, str]


@dataclass
class Destination:
    broker: tuple[str, str, int]
    url: Callable[[int], str]
    """The relay's --to URL through a proxy on this port."""
    read: Callable[[], list[Entry]]
    count: Callable[[], int]
    """Entries the broker holds (repeats included): cheap, for waiting on progress."""
    remove: Callable[[], None]
    exactly_once: bool
    wipe: Callable[[], None] = lambda: None
    """Lose every entry, as an operator's mistake would (Redis: the stream deleted and made
    again; NATS: the stream purged): what a rebuild starts from."""

    @property
    def address(self) -> tuple[str, int]:
        return self.broker[1], self.broker[2]


def redis_stream() -> Destination:
    stream = f"relay-acceptance-{uuid.uuid4().hex[:8]}"
    client = redis.Redis(host=REDIS[1], port=REDIS[2], decode_responses=True)
    client.xadd(stream, {"created": "by the test"})  # the relay must not create it

    def read() -> list[Entry]:
        entries = cast(list[tuple[str, dict[str, str]]], client.xrange(stream))[1:]
        return [
            (f["outbox-position"], f.get("outbox-partition-key"), f["outbox-message-id"])
            for _, f in entries
        ]

    def remove() -> None:
        keys = [stream, *client.scan_iter(f"{stream}:outbox-published:*", count=10_000)]
        client.delete(*keys)
        client.close()

    def wipe() -> None:
        client.delete(stream)
        client.xadd(stream, {"created": "by the test"})

    return Destination(
        REDIS,
        lambda port: f"redis://127.0.0.1:{port}/0?stream={stream}",
        read,
        lambda: int(client.xlen(stream)) - 1,
        remove,
        True,
        wipe,
    )


def nats_stream() -> Destination:
    name = f"RELAY_ACCEPTANCE_{uuid.uuid4().hex[:8]}"
    subject = name.lower()

    async def create() -> None:
        connection = await nats.connect(f"nats://{NATS[1]}:{NATS[2]}")
        config = StreamConfig(name=name, subjects=[f"{subject}.>"], duplicate_window=7200)
        await connection.jetstream().add_stream(config)
        await connection.close()

    async def fetch() -> list[Entry]:
        connection = await nats.connect(f"nats://{NATS[1]}:{NATS[2]}")
        stream = connection.jetstream()
        held = (await stream.stream_info(name)).state.messages
        config = ConsumerConfig(ack_policy=AckPolicy.NONE, deliver_policy=DeliverPolicy.ALL)
        reader = await stream.pull_subscribe(f"{subject}.>", stream=name, config=config)
        entries: list[Entry] = []
        while len(entries) < held:
            for message in await reader.fetch(min(1000, held - len(entries)), timeout=10):
                headers = fields.read_header_fields(message.headers or {})
                entries.append(
                    (
                        headers["outbox-position"],
                        headers.get("outbox-partition-key"),
                        headers["outbox-message-id"],
                    )
                )
        await connection.close()
        return entries

    async def count() -> int:
        connection = await nats.connect(f"nats://{NATS[1]}:{NATS[2]}")
        held = (await connection.jetstream().stream_info(name)).state.messages
        await connection.close()
        return held

    async def delete() -> None:
        connection = await nats.connect(f"nats://{NATS[1]}:{NATS[2]}")
        await connection.jetstream().delete_stream(name)
        await connection.close()

    async def purge() -> None:
        connection = await nats.connect(f"nats://{NATS[1]}:{NATS[2]}")
        await connection.jetstream().purge_stream(name)
        await connection.close()

    asyncio.run(create())
    return Destination(
        NATS,
        lambda port: f"nats://127.0.0.1:{port}?subject={subject}.{{partition_key}}",
        lambda: asyncio.run(fetch()),
        lambda: asyncio.run(count()),
        lambda: asyncio.run(delete()),
        True,
        lambda: asyncio.run(purge()),
    )


def rabbitmq_queue() -> Destination:
    """An exchange and a queue bound to it; every read takes what the queue holds so far,
    so reads accumulate here."""
    exchange = f"relay-acceptance-{uuid.uuid4().hex[:8]}"
    address = f"amqp://guest:guest@{RABBITMQ[1]}:{RABBITMQ[2]}/"
    taken: list[Entry] = []

    async def create() -> None:
        connection = await aio_pika.connect(address)
        channel = await connection.channel()
        bound = await channel.declare_exchange(exchange, aio_pika.ExchangeType.TOPIC, durable=True)
        queue = await channel.declare_queue(exchange, durable=True)
        await queue.bind(bound, "#")
        await connection.close()

    async def fetch() -> list[Entry]:
        connection = await aio_pika.connect(address)
        channel = await connection.channel()
        queue = await channel.declare_queue(exchange, passive=True)
        # Only what is there now (the relay keeps publishing), one basic.get each: a consumer
        # with prefetch would be sent more than it takes, and drop them unacknowledged.
        for _ in range(queue.declaration_result.message_count or 0):
            message = await queue.get(no_ack=True)
            headers = message.headers
            key = headers.get("outbox-partition-key")
            position = str(headers["outbox-position"])
            taken.append((position, None if key is None else str(key), str(message.message_id)))
        await connection.close()
        return list(taken)

    async def count() -> int:
        connection = await aio_pika.connect(address)
        queue = await (await connection.channel()).declare_queue(exchange, passive=True)
        await connection.close()
        return len(taken) + (queue.declaration_result.message_count or 0)

    async def delete() -> None:
        connection = await aio_pika.connect(address)
        channel = await connection.channel()
        await channel.queue_delete(exchange)
        await channel.exchange_delete(exchange)
        await connection.close()

    asyncio.run(create())
    return Destination(
        RABBITMQ,
        lambda port: (
            f"amqp://guest:guest@127.0.0.1:{port}/?exchange={exchange}&routing_key={{partition_key}}"
        ),
        lambda: asyncio.run(fetch()),
        lambda: asyncio.run(count()),
        lambda: asyncio.run(delete()),
        False,
    )


DESTINATIONS = {"nats": nats_stream, "redis": redis_stream, "rabbitmq": rabbitmq_queue}
