"""Relays against the broker itself, in the same run:
- throughput: messages per second relayed from a backlog with the defaults (one relay,
  batches of 500), next to a plain client loop publishing the same messages with the same
  batching and confirmations (the physical limit here); and the CPU each spends per message,
  this process's (the client loop; the daemon reading, relaying and checkpointing) and the
  broker's, which on a machine shared with writers is what bounds both;
- latency: commit to the broker's confirmation, p50 and p99, with 16 writer processes
  committing 1,000 messages/s between them (bench/load_bench.py's writers), in three
  interleaved rounds, next to the daemon with an `async def` no-op handler (what the relay adds
  over delivery itself) and each broker's plain client in the simplest outbox loop (read
  below the frontier every 1 ms, publish, await the confirmations: what the broker gives
  without the relay); each relay but NATS's against the NATS relay's, which RabbitMQ's aims
  are set by.

A broker that does not answer on localhost is left out, with a note saying so.
"""

import asyncio
import contextlib
import os
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aio_pika
import nats
import psycopg
import redis.asyncio
from nats.js.api import StreamConfig

import outbox_relays
import poller
from bench import latency_rounds, load_bench
from bench.common import Measurement
from bench.poller_bench import fill
from outbox.positions import START, Position
from outbox_relays import fields
from poller import operations
from poller.daemon.background import DaemonThread
from poller.message import Message
from poller.store.message_reads import prepare_reader, read_batch

TITLE = "Relays: throughput vs each broker's own client loop, commit-to-broker latency"
BATCH = 500
HOST = "127.0.0.1"
LATENCY_RATE = 1_000.0
RELAY = "outbox relay"
CLIENT = "plain client loop"
DAEMON = "daemon, async def no-op"

Publish = Callable[[list[Message]], Awaitable[object]]

BROKER_PROCESSES = {"nats": "nats-server", "redis": "redis-server", "rabbitmq": "beam.smp"}
"""Each broker's process, whose CPU the throughput rows count beside ours."""

AIMS = {"nats": "aim >= 0.8x", "redis": "aim >= 0.8x", "rabbitmq": "aim >= 0.9x"}
LATENCY_AIMS = {"p50": "aim <= 2x", "p99": "aim <= 3x"}
"""The RabbitMQ relay's commit-to-confirm against the NATS relay's, in the same rounds."""


@dataclass(frozen=True)
class Destination:
    """A stream, or an exchange with a queue, made for one measurement."""

    relay_url: str
    publish: Publish
    """The broker's own client publishing one batch, confirmations awaited."""


Make = Callable[[], contextlib.AbstractAsyncContextManager[Destination]]
Run = Callable[[Awaitable[object]], object]
"""Runs a coroutine to its end on a held destination's loop."""


def run(database_url: str, quick: bool) -> list[Measurement]:
    count = 2_000 if quick else int(os.environ.get("OUTBOX_BENCH_RELAY_MESSAGES", 1_000_000))
    brokers: dict[str, tuple[int, Make]] = {
        "nats": (4222, nats_stream),
        "redis": (6379, redis_stream),
        "rabbitmq": (5672, rabbit_queue),
    }
    answering = {name: make for name, (port, make) in brokers.items() if answers(port)}
    measurements = [
        Measurement(f"{name}, throughput", RELAY, 0, "msg/s", note=f"not answering on {HOST}")
        for name in brokers
        if name not in answering
    ]
    fill(database_url, "relay", count)
    messages = backlog(database_url, count)
    for name, make in answering.items():
        client, relayed = asyncio.run(throughput(database_url, messages, make, name))
        group = f"{name}, {count:,} messages"
        cpu = f"{name}, CPU per message"
        measurements += [
            Measurement(group, CLIENT, client.rate, "msg/s", note=f"batches of {BATCH}"),
            Measurement(group, RELAY, relayed.rate, "msg/s", CLIENT, AIMS[name]),
            Measurement(
                cpu, CLIENT, client.cpu, "us", note=client.broker_note, higher_is_better=False
            ),
            Measurement(cpu, RELAY, relayed.cpu, "us", CLIENT, relayed.broker_note, False),
        ]
    measurements += latency(database_url, answering, quick)
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


@dataclass(frozen=True)
class Drain:
    rate: float
    """Messages per second."""
    cpu: float
    """Microseconds of this process's CPU per message."""
    broker: float | None
    """Microseconds of the broker process's CPU per message, where it could be read."""

    @property
    def broker_note(self) -> str:
        return "" if self.broker is None else f"broker {self.broker:,.0f} us"


async def throughput(
    database_url: str, messages: list[Message], make: Make, broker: str
) -> tuple[Drain, Drain]:
    async with make() as destination:
        with drained(messages, broker) as client:
            for start in range(0, len(messages), BATCH):
                await destination.publish(messages[start : start + BATCH])
    async with make() as destination:
        with drained(messages, broker) as relayed:
            await asyncio.to_thread(relay_rate, database_url, destination, messages)
    return client.pop(), relayed.pop()


@contextlib.contextmanager
def drained(messages: list[Message], broker: str) -> Iterator[list[Drain]]:
    """Times the block's drain of `messages`: yields a list that holds its Drain after."""
    result: list[Drain] = []
    pid = broker_pid(BROKER_PROCESSES[broker])
    started, cpu, broker_cpu = time.perf_counter(), time.process_time(), cpu_seconds(pid)
    yield result
    elapsed, count = time.perf_counter() - started, len(messages)
    broker_used = cpu_seconds(pid)
    result.append(
        Drain(
            count / elapsed,
            (time.process_time() - cpu) / count * 1e6,
            None
            if broker_cpu is None or broker_used is None
            else (broker_used - broker_cpu) / count * 1e6,
        )
    )


def broker_pid(process_name: str) -> int | None:
    """The oldest local process of that name (the broker the bench talks to on localhost)."""
    found = subprocess.run(["pgrep", "-o", "-x", process_name], capture_output=True, text=True)
    return int(found.stdout) if found.returncode == 0 else None


def cpu_seconds(pid: int | None) -> float | None:
    """User and system CPU seconds of process `pid` (Linux's /proc), or None."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text() if pid is not None else ""
    except OSError:
        return None
    if not stat:
        return None
    fields_after_name = stat.rsplit(")", 1)[1].split()
    return (int(fields_after_name[11]) + int(fields_after_name[12])) / os.sysconf("SC_CLK_TCK")


def relay_rate(database_url: str, destination: Destination, messages: list[Message]) -> float:
    """A relay in this process (as DaemonThread runs the daemon), until the stored checkpoint
    reaches the last message."""
    name = f"relay-{uuid.uuid4().hex[:8]}"
    with psycopg.connect(database_url, autocommit=True) as conn:
        operations.create(conn, name, "relay", "start", {})
        relay = outbox_relays.handler(destination.relay_url)
        started = time.perf_counter()
        with DaemonThread(database_url, [name], relay, closers=[relay.close]):
            while operations.get(conn, name).checkpoint < messages[-1].at:
                time.sleep(0.05)
            elapsed = time.perf_counter() - started
    return len(messages) / elapsed


# --- latency under 16 writers ----------------------------------------------------------------


def latency(database_url: str, answering: dict[str, Make], quick: bool) -> list[Measurement]:
    """Interleaved rounds of every consumer, each on a fresh publication, percentiles pooled
    over them (a drift in the machine's load falls on all alike; each round's figure is in
    the note). Each broker's plain client loop is against NATS's, each relay but NATS's
    against the NATS relay, the NATS relay against the daemon; a relay's note names its own
    client loop's figure, what the broker gives without the relay."""
    seconds = latency_rounds.QUICK_SECONDS if quick else latency_rounds.FULL_SECONDS
    rounds = 1 if quick else latency_rounds.ROUNDS
    timing = load_bench.Timing(0.0, {}, sample_every=1.0, drain_timeout=30.0)
    daemon = load_bench.IN_PROCESS[load_bench.ASYNC_DAEMON]
    contenders = {DAEMON: daemon}
    for name, make in answering.items():
        contenders[client_named(name)] = load_bench.Contender(
            f"{name}-client", client_loop_consumer(make)
        )
        contenders[relay_named(name)] = load_bench.Contender(name, relay_consumer(make))
    with load_bench.writer_processes(database_url) as writers:
        # Untimed: a fresh database's first run is slower (new tables, cold caches).
        load_bench.consume_under_load(
            database_url, writers, daemon.consumer, "relay-warm-up", LATENCY_RATE, timing, seconds
        )
        its_rounds, _ = load_bench.rounds_at(
            database_url, writers, contenders, LATENCY_RATE, timing, seconds, rounds, "relay"
        )
    setting = f"16 writers, {LATENCY_RATE:,.0f} msg/s, {latency_rounds.rounds_named(rounds)}"
    measurements = []
    for quantile in ("p50", "p99"):
        for variant, its in its_rounds.items():
            baseline = latency_baseline(variant, its_rounds)
            notes = [
                latency_aim(variant, baseline, quantile),
                own_client_loop(variant, its_rounds, quantile),
                f"rounds {latency_rounds.each_round(its, quantile)} ms",
            ]
            if quantile == "p99" and any(r.parts for r in its):
                # (c) is the relay's own: from its read to the broker's last confirm.
                notes.append(latency_rounds.slowest_share(its))
            if unhandled := sum(r.unhandled for r in its):
                notes.append(f"{unhandled:,} not confirmed in time")
            measurements.append(
                Measurement(
                    f"latency, {setting}, {quantile}",
                    variant,
                    latency_rounds.pooled(its, quantile),
                    "ms",
                    baseline,
                    "; ".join(note for note in notes if note),
                    False,
                )
            )
    return measurements


def latency_baseline(variant: str, variants: Collection[str]) -> str | None:
    """The daemon's row stands alone, the NATS relay's is against it, and every other relay's
    against the NATS relay's (what the aims compare with), or the daemon's without NATS; each
    client loop but NATS's against NATS's, which stands alone."""
    if variant == DAEMON:
        return None
    if variant.startswith(CLIENT):
        nats_client = client_named("nats")
        return nats_client if nats_client in variants and variant != nats_client else None
    nats = relay_named("nats")
    return nats if nats in variants and variant != nats else DAEMON


def latency_aim(variant: str, baseline: str | None, quantile: str) -> str:
    """The issue's aims are the RabbitMQ relay's, against the NATS relay."""
    if variant == relay_named("rabbitmq") and baseline == relay_named("nats"):
        return LATENCY_AIMS[quantile]
    return ""


def own_client_loop(
    variant: str, its_rounds: Mapping[str, list[latency_rounds.Round]], quantile: str
) -> str:
    """A relay's figure against its broker's plain client loop in the same rounds."""
    if not variant.startswith(RELAY):
        return ""
    client = its_rounds.get(client_named(variant.removeprefix(f"{RELAY} to ")))
    if not client:
        return ""
    own = latency_rounds.pooled(client, quantile)
    relayed = latency_rounds.pooled(its_rounds[variant], quantile)
    return f"its client loop {own:.1f} ms ({relayed / own:.2f}x of it)"


def relay_named(broker: str) -> str:
    return f"{RELAY} to {broker}"


def client_named(broker: str) -> str:
    return f"{CLIENT} to {broker}"


def client_loop_consumer(make: Make) -> load_bench.Consumer:
    """The broker's own client in the simplest outbox loop, on a thread of its own: read what
    is below the frontier (the bare loop's query, every 1 ms), publish it, await the broker's
    confirmations, read on. What the relay is held to, under the same writers."""

    @contextlib.contextmanager
    def consumer(url: str, publication: str, handled_at: dict[str, float]) -> Iterator[None]:
        stop, ready = threading.Event(), threading.Event()
        failed: list[BaseException] = []

        def loop() -> None:
            try:
                with held(make) as (run, destination):
                    ready.set()
                    publish_rows(url, publication, handled_at, stop, run, destination)
            except BaseException as error:
                failed.append(error)
                ready.set()

        thread = threading.Thread(target=loop, name=f"client-loop-{publication}")
        thread.start()
        ready.wait()
        if failed:
            thread.join()
            raise failed[0]
        try:
            yield
        finally:
            stop.set()
            thread.join()
        if failed:
            raise failed[0]

    return consumer


def publish_rows(
    url: str,
    publication: str,
    handled_at: dict[str, float],
    stop: threading.Event,
    run: Run,
    destination: Destination,
) -> None:
    """Until `stop`: each read's rows published as one batch, confirmations awaited."""
    after = START
    with psycopg.connect(url, autocommit=True) as conn:
        prepare_reader(conn)  # the read connection as the daemon sets it up
        while not stop.is_set():
            batch = read_batch(conn, publication, after, BATCH)
            if not batch:
                time.sleep(0.001)
                continue
            run(destination.publish(batch))
            now = time.monotonic()
            for message in batch:
                handled_at[message.message_id] = now
            after = batch[-1].at


def relay_consumer(make: Make) -> load_bench.Consumer:
    """The relay, recording when the broker confirmed each message (its call returned)."""

    @contextlib.contextmanager
    def consumer(url: str, publication: str, handled_at: dict[str, float]) -> Iterator[None]:
        with psycopg.connect(url) as conn:
            operations.create(conn, publication, publication, "start", {})
        with held(make) as (_, destination):
            relay = outbox_relays.handler(destination.relay_url)

            @poller.batch_handler()
            async def confirmed(messages: list[Message]) -> Any:
                outcomes = await relay(messages)
                now = time.monotonic()
                for message in messages:
                    handled_at[message.message_id] = now
                return outcomes

            with DaemonThread(url, [publication], confirmed, closers=[relay.close]):
                yield

    return consumer


@contextlib.contextmanager
def held(make: Make) -> Iterator[tuple[Run, Destination]]:
    """An async destination held open from synchronous code, on a loop of its own, with what
    runs a coroutine on that loop (from one thread at a time)."""
    loop = asyncio.new_event_loop()
    context = make()
    try:
        yield loop.run_until_complete, loop.run_until_complete(context.__aenter__())
    finally:
        loop.run_until_complete(context.__aexit__(None, None, None))
        loop.close()


# --- the brokers -----------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def nats_stream() -> AsyncIterator[Destination]:
    name = f"BENCH_{uuid.uuid4().hex[:8]}"
    subject = name.lower()
    connection = await nats.connect(f"nats://{HOST}:4222")
    jetstream = connection.jetstream()
    await jetstream.add_stream(StreamConfig(name=name, subjects=[f"{subject}.>"]))

    async def publish(batch: list[Message]) -> None:
        await asyncio.gather(
            *(
                jetstream.publish(
                    f"{subject}.client",
                    fields.payload(m),
                    headers={**fields.header_fields(m), "Nats-Msg-Id": fields.dedup_id(m)},
                )
                for m in batch
            )
        )

    try:
        yield Destination(f"nats://{HOST}:4222?subject={subject}.relay", publish)
    finally:
        await jetstream.delete_stream(name)
        await connection.close()


@contextlib.asynccontextmanager
async def redis_stream() -> AsyncIterator[Destination]:
    stream = f"bench-{uuid.uuid4().hex[:8]}"
    client = redis.asyncio.Redis(host=HOST, port=6379)
    await client.xadd(stream, {"created": "by the bench"})

    async def publish(batch: list[Message]) -> None:
        pipeline = client.pipeline(transaction=False)
        for m in batch:
            entry: dict[Any, Any] = {"data": m.data_text, **fields.metadata(m)}
            pipeline.xadd(stream, entry)
        await pipeline.execute()

    try:
        yield Destination(f"redis://{HOST}:6379/0?stream={stream}", publish)
    finally:
        async for key in client.scan_iter(f"{stream}:outbox-published:*", count=10_000):
            await client.delete(key)
        await client.delete(stream)
        await client.aclose()


@contextlib.asynccontextmanager
async def rabbit_queue() -> AsyncIterator[Destination]:
    name = f"bench-{uuid.uuid4().hex[:8]}"
    connection = await aio_pika.connect(f"amqp://guest:guest@{HOST}:5672/")
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

    try:
        yield Destination(
            f"amqp://guest:guest@{HOST}:5672/?exchange={name}&routing_key=relay", publish
        )
    finally:
        await channel.queue_delete(name)
        await channel.exchange_delete(name)
        await connection.close()
