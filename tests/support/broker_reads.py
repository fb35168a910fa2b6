"""One message published by a relay target to each broker on this machine, and what a
consumer there received: headers (or entry fields) and body, as its client gives them."""

import asyncio
import uuid
from dataclasses import dataclass
from typing import Any, cast

import aio_pika
import nats
import redis

import outbox_relays
from outbox_relays.kinds import open_target
from poller.message import Message
from tests.support import brokers


@dataclass(frozen=True)
class Received:
    headers: dict[str, Any]
    """Headers, AMQP headers, or a Redis entry's fields."""
    body: bytes = b""
    content_type: str | None = None
    """AMQP's content_type property."""


def published(url: str, messages: list[Message], *, relay: bool = False) -> None:
    """By the URL's target, or (`relay`) through the relay, as the daemon calls it."""
    if relay:
        handler = outbox_relays.handler(url, declare=True)

        async def through_the_relay() -> None:
            try:
                assert await handler(messages) == {}
            finally:
                await handler.close()

        asyncio.run(through_the_relay())
        return

    async def publish() -> None:
        target = open_target(url, declare=True)
        try:
            assert await target.publish(messages) == {}
        finally:
            await target.close()

    asyncio.run(publish())


def from_nats(messages: list[Message], query: str = "", *, relay: bool = False) -> list[Received]:
    brokers.require(brokers.NATS)
    subject = f"reads.{uuid.uuid4().hex[:8]}"
    stream = subject.replace(".", "_").upper()
    url = f"nats://127.0.0.1:4222?subject={subject}&stream={stream}{query}"

    async def received() -> list[Received]:
        connection = await nats.connect(f"nats://{brokers.NATS[1]}:{brokers.NATS[2]}")
        try:
            subscription = await connection.subscribe(subject)
            await asyncio.to_thread(published, url, messages, relay=relay)
            got = [await subscription.next_msg(timeout=10) for _ in messages]
            await connection.jetstream().delete_stream(stream)
            return [Received(dict(m.headers or {}), m.data) for m in got]
        finally:
            await connection.close()

    return asyncio.run(received())


def from_redis(messages: list[Message], query: str = "") -> list[Received]:
    brokers.require(brokers.REDIS)
    stream = f"reads-{uuid.uuid4().hex[:8]}"
    published(f"redis://127.0.0.1:6379/0?stream={stream}{query}", messages)
    client = redis.Redis(host=brokers.REDIS[1], port=brokers.REDIS[2], decode_responses=True)
    try:
        entries = cast(list[tuple[str, dict[str, str]]], client.xrange(stream))
        return [Received(entry) for _, entry in entries]
    finally:
        client.delete(stream, *client.scan_iter(f"{stream}:outbox-published:*"))
        client.close()


def from_rabbitmq(messages: list[Message], query: str = "") -> list[Received]:
    brokers.require(brokers.RABBITMQ)
    queue = f"reads-{uuid.uuid4().hex[:8]}"
    published(f"amqp://guest:guest@127.0.0.1:5672/?queue={queue}{query}", messages)

    async def received() -> list[Received]:
        connection = await aio_pika.connect("amqp://guest:guest@127.0.0.1:5672/")
        try:
            channel = await connection.channel()
            declared = await channel.declare_queue(queue, passive=True)
            got = [await declared.get(no_ack=True) for _ in messages]
            await channel.queue_delete(queue)
            return [Received(dict(m.headers), m.body, m.content_type) for m in got]
        finally:
            await connection.close()

    return asyncio.run(received())


READERS = {"nats": from_nats, "redis": from_redis, "rabbitmq": from_rabbitmq}
