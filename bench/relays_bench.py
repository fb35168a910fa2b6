"""Relays against the broker's own publish rate: messages per second relayed from a backlog
with the defaults (one relay, batches of 500), next to a plain client loop publishing the same
messages with the same batching and confirmations, in the same run (the physical limit here).

A broker that does not answer on localhost is left out, with a note saying so.
"""

import asyncio
import os
import socket
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import aio_pika
import nats
import psycopg
import redis.asyncio
from nats.js.api import StreamConfig

import relays
from bench.common import Measurement
from bench.poller_bench import fill
from outbox.positions import Position
from poller import administration
from poller.daemon.background import DaemonThread
from poller.message import Message
from poller.store.message_reads import read_batch
from relays import fields

TITLE = "Relays: messages/s relayed from a backlog vs the broker's own client loop"
BATCH = 500
HOST = "127.0.0.1"
PORTS = {"nats": 4222, "redis": 6379, "rabbitmq": 5672}


def run(database_url: str, quick: bool) -> list[Measurement]:
    count = 2_000 if quick else int(os.environ.get("OUTBOX_BENCH_RELAY_MESSAGES", 1_000_000))
    fill(database_url, "relay", count)
    messages = backlog(database_url, count)
    measurements = []
    for broker, bench in (("nats", nats_bench), ("redis", redis_bench), ("rabbitmq", rabbit_bench)):
        group = f"{broker}, {count:,} messages"
        if not answers(PORTS[broker]):
            measurements.append(
                Measurement(group, "relay", 0, "msg/s", note=f"not answering on {HOST}")
            )
            continue
        client_rate, relay_rate = asyncio.run(bench(database_url, messages))
        measurements += [
            Measurement(group, "plain client loop", client_rate, "msg/s", note="batches of 500"),
            Measurement(
                group, "outbox relay", relay_rate, "msg/s", "plain client loop", "aim >= 0.5x"
            ),
        ]
    return measurements


def answers(port: int) -> bool:
    try:
        socket.create_connection((HOST, port), timeout=1).close()
    except OSError:
        return False
    return True


def backlog(database_url: str, count: int) -> list[Message]:
    """The backlog as the relay reads it, for the client loop to publish the same bytes."""
    messages: list[Message] = []
    after = Position(0, 0)
    with psycopg.connect(database_url, autocommit=True) as conn:
        while len(messages) < count:
            page = read_batch(conn, "relay", after, 5_000)
            messages += page
            after = page[-1].at
    return messages


async def timed(
    publish: Callable[[list[Message]], Awaitable[object]], messages: list[Message]
) -> float:
    started = time.perf_counter()
    for start in range(0, len(messages), BATCH):
        await publish(messages[start : start + BATCH])
    return len(messages) / (time.perf_counter() - started)


def relay_rate(database_url: str, url: str, messages: list[Message]) -> float:
    """`outbox relay` in this process (as DaemonThread runs `outbox poll`), until the stored
    checkpoint reaches the last message."""
    name = f"relay-{uuid.uuid4().hex[:8]}"
    with psycopg.connect(database_url, autocommit=True) as conn:
        administration.create(conn, name, "relay", "start", {})
        started = time.perf_counter()
        relay = relays.handler(url)
        with DaemonThread(database_url, [name], relay, closers=[relay.close]):
            while administration.get(conn, name).checkpoint < messages[-1].at:
                time.sleep(0.05)
            elapsed = time.perf_counter() - started
    return len(messages) / elapsed


async def nats_bench(database_url: str, messages: list[Message]) -> tuple[float, float]:
    stream = f"BENCH_{uuid.uuid4().hex[:8]}"
    connection = await nats.connect(f"nats://{HOST}:{PORTS['nats']}")
    jetstream = connection.jetstream()
    await jetstream.add_stream(StreamConfig(name=stream, subjects=[f"{stream.lower()}.>"]))

    async def publish(batch: list[Message]) -> None:
        await asyncio.gather(
            *(
                jetstream.publish(
                    f"{stream.lower()}.client",
                    fields.payload(m),
                    headers={**fields.metadata(m), "Nats-Msg-Id": fields.message_id(m)},
                )
                for m in batch
            )
        )

    client = await timed(publish, messages)
    await jetstream.purge_stream(stream)
    url = f"nats://{HOST}:{PORTS['nats']}?subject={stream.lower()}.relay"
    relayed = await asyncio.to_thread(relay_rate, database_url, url, messages)
    await jetstream.delete_stream(stream)
    await connection.close()
    return client, relayed


async def redis_bench(database_url: str, messages: list[Message]) -> tuple[float, float]:
    stream = f"bench-{uuid.uuid4().hex[:8]}"
    client = redis.asyncio.Redis(host=HOST, port=PORTS["redis"])

    async def publish(batch: list[Message]) -> None:
        pipeline = client.pipeline(transaction=False)
        for m in batch:
            entry: dict[Any, Any] = {"data": m.data_text, **fields.metadata(m)}
            pipeline.xadd(f"{stream}-client", entry)
        await pipeline.execute()

    client_rate = await timed(publish, messages)
    await client.delete(f"{stream}-client")
    await client.xadd(stream, {"created": "by the bench"})
    url = f"redis://{HOST}:{PORTS['redis']}/0?stream={stream}"
    relayed = await asyncio.to_thread(relay_rate, database_url, url, messages)
    async for key in client.scan_iter(f"{stream}:outbox-published:*", count=10_000):
        await client.delete(key)
    await client.delete(stream)
    await client.aclose()
    return client_rate, relayed


async def rabbit_bench(database_url: str, messages: list[Message]) -> tuple[float, float]:
    name = f"bench-{uuid.uuid4().hex[:8]}"
    connection = await aio_pika.connect(f"amqp://guest:guest@{HOST}:{PORTS['rabbitmq']}/")
    channel = await connection.channel(publisher_confirms=True)
    exchange = await channel.declare_exchange(name, aio_pika.ExchangeType.TOPIC, durable=True)
    queue = await channel.declare_queue(name, durable=True)
    await queue.bind(exchange, "#")

    async def publish(batch: list[Message]) -> None:
        await asyncio.gather(
            *(
                exchange.publish(
                    aio_pika.Message(
                        fields.payload(m),
                        delivery_mode=aio_pika.DeliveryMode.PERSISTENT,
                        message_id=fields.message_id(m),
                        type=m.message_type,
                        content_type="application/json",
                        headers=dict(fields.metadata(m)),
                    ),
                    routing_key="client",
                    mandatory=True,
                )
                for m in batch
            )
        )

    client = await timed(publish, messages)
    await queue.purge()
    url = f"amqp://guest:guest@{HOST}:{PORTS['rabbitmq']}/?exchange={name}&routing_key=relay"
    relayed = await asyncio.to_thread(relay_rate, database_url, url, messages)
    await channel.queue_delete(name)
    await channel.exchange_delete(name)
    await connection.close()
    return client, relayed
