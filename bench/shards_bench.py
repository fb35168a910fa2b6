"""Shards: one subscription led by several processes.

- drain: N messages (100,000; OUTBOX_BENCH_SHARDS_MESSAGES sets N, a quick run uses 5,000),
  pinned, 4 consumers, 1,000 keys, a plain `def` handler burning 0.3 ms of CPU-bound Python a
  message; every daemon in a process of its own (bench/daemon_processes.py). One process on an
  unsharded subscription, one on 4 shards, two on 4 shards. Timed from the commit of the
  backlog (one transaction, written once every process leads its shards) to the last
  handler's return, so process start and the first hand-over of shards are left out.
- read: the daemon's own reads (decoded messages) paging through those N messages, 500 a
  page: the whole publication (read_batch) against one shard of 4 (read_shards_batch: the same
  keyset read filtered by outbox.message_shard, so it passes over every row to return a
  quarter of them).
- latency: bench/load_bench.py's 16 writer processes at 50% of their solo rate, commit to
  handler: 2 processes on 4 shards, and 1 process on 4 shards (what the shards cost without
  a second process), against 1 process on an unsharded subscription.
"""

import asyncio
import contextlib
import os
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import psycopg

from bench.common import Measurement, percentiles
from bench.daemon_processes import DaemonProcesses, collecting, iterations_for
from bench.load_bench import (
    Consumer,
    HandledAt,
    Timing,
    consume_under_load,
    solo_rate,
    writer_processes,
)
from outbox.positions import START, Position
from poller import administration
from poller.message import Message
from poller.store.message_reads import prepare_reader_async, read_batch_async
from poller.store.shard_reads import UNBOUNDED, read_shards_batch

TITLE = "Shards: one subscription over several processes (CPU-bound handler, reads, latency)"

MESSAGES_VARIABLE = "OUTBOX_BENCH_SHARDS_MESSAGES"
KEYS = 1000
HANDLER_SECONDS = 0.0003
DRAIN_SETTINGS = {"strategy": "pinned", "consumers": 4}
PAGE = 500

UNSHARDED = "1 process, unsharded"
ONE_PROCESS = "1 process, 4 shards"
TWO_PROCESSES = "2 processes, 4 shards"

FULL_LATENCY = Timing(3.0, {50: 10.0}, sample_every=1.0, drain_timeout=30.0)
QUICK_LATENCY = Timing(0.5, {50: 1.0}, sample_every=0.25, drain_timeout=10.0)


def run(database_url: str, quick: bool) -> list[Measurement]:
    count = 5_000 if quick else int(os.environ.get(MESSAGES_VARIABLE, "100000"))
    return (
        drain(database_url, count)
        + reads(database_url, drained(2, 4), count)
        + latency(database_url, QUICK_LATENCY if quick else FULL_LATENCY)
    )


# --- where the shards are --------------------------------------------------------------------


def create(url: str, name: str, shards: int, settings: dict[str, Any]) -> None:
    """A subscription of `name` on the publication of the same name, from its start."""
    with psycopg.connect(url) as conn:
        administration.create(conn, name, name, "start", settings, shards)


def leaders(url: str, name: str) -> list[int]:
    """The pid leading each shard of the current count (alive leases), in shard order."""
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT l.pid FROM outbox.subscriptions AS s"
            " JOIN outbox.subscription_leaders AS l"
            "   ON l.subscription_id = s.subscription_id AND l.shard_count = s.shard_count"
            " WHERE s.subscription_id = %s AND l.expires_at > clock_timestamp()"
            " ORDER BY l.shard",
            (name,),
        ).fetchall()
    return [row[0] for row in rows]


def wait_for_leaders(url: str, name: str, shards: int, processes: DaemonProcesses) -> None:
    """Until every shard is led and each process leads its even share of them."""
    share = shards // len(processes.pids)
    deadline = time.monotonic() + 60
    while True:
        led = leaders(url, name)
        if len(led) == shards and all(led.count(pid) == share for pid in processes.pids):
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"{name}: shards not shared within 60 s: {led}")
        time.sleep(0.05)


# --- drain -----------------------------------------------------------------------------------


def write_backlog(url: str, publication: str, count: int) -> float:
    """`count` messages over KEYS keys in one transaction; when its commit returned."""
    with psycopg.connect(url) as conn:
        conn.execute(
            "INSERT INTO outbox.messages"
            " (publication_id, message_id, message_type, partition_key, data)"
            " SELECT %s, n::text, 'Drained', 'key-' || n %% %s,"
            " jsonb_build_object('n', n, 'pad', repeat('x', 100))"
            " FROM generate_series(1, %s) AS n",
            (publication, KEYS, count),
        )
        conn.commit()
        return time.monotonic()


def drained(processes: int, shards: int) -> str:
    """The subscription, and publication, of one drain."""
    return f"drain-{processes}-{shards}"


def drain_rate(url: str, processes: int, shards: int, count: int, iterations: int) -> float:
    name = drained(processes, shards)
    # Every drain starts on an empty table, and the last one's rows stay for `reads`.
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("TRUNCATE outbox.messages")
    create(url, name, shards, DRAIN_SETTINGS)
    with DaemonProcesses(url, name, processes, iterations) as daemons:
        wait_for_leaders(url, name, shards, daemons)
        committed_at = write_backlog(url, name, count)
        deadline = committed_at + 600
        while daemons.collect() < count:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{name}: {len(daemons.handled)} of {count} in 600 s")
            time.sleep(0.05)
        finished_at = max(daemons.handled.values())
    return count / (finished_at - committed_at)


def drain(url: str, count: int) -> list[Measurement]:
    iterations = iterations_for(HANDLER_SECONDS)
    group = f"drain {count:,}, pinned, {KEYS:,} keys, 0.3 ms CPU each"
    unsharded = drain_rate(url, 1, 1, count, iterations)
    one = drain_rate(url, 1, 4, count, iterations)
    two = drain_rate(url, 2, 4, count, iterations)
    return [
        Measurement(group, UNSHARDED, unsharded, "msg/s", note="4 consumers"),
        Measurement(group, ONE_PROCESS, one, "msg/s", UNSHARDED, note="one GIL for all shards"),
        Measurement(group, TWO_PROCESSES, two, "msg/s", ONE_PROCESS, note="aim >= 1.6x"),
    ]


# --- read cost -------------------------------------------------------------------------------


Read = Callable[[Position], Awaitable[list[Message]]]


async def page_through(read: Read) -> tuple[int, float]:
    """Every message `read` pages to, from the start: (messages, seconds)."""
    count, after = 0, START
    started = time.perf_counter()
    while messages := await read(after):
        count += len(messages)
        after = messages[-1].at
    return count, time.perf_counter() - started


async def fastest(read: Read) -> tuple[int, float]:
    """The fastest of three passes (the first warms the cache)."""
    return min([await page_through(read) for _ in range(3)], key=lambda result: result[1])


async def read_both(url: str, publication: str) -> tuple[tuple[int, float], tuple[int, float]]:
    """The daemon's own reads, on a connection set up as its read connection: the whole
    publication, then shard 0 of 4."""
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        await prepare_reader_async(conn)

        async def whole(after: Position) -> list[Message]:
            return await read_batch_async(conn, publication, after, PAGE)

        async def shard(after: Position) -> list[Message]:
            batch = await read_shards_batch(conn, publication, 4, [0], after, UNBOUNDED, PAGE)
            return [message for _, message in batch.messages]

        return await fastest(whole), await fastest(shard)


def reads(url: str, publication: str, count: int) -> list[Measurement]:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE outbox.messages")
    (whole, whole_seconds), (shard, shard_seconds) = asyncio.run(read_both(url, publication))
    assert whole == count, f"read {whole} of {count}"
    group = f"read {count:,} messages, pages of {PAGE}"
    baseline = "read_batch, whole publication"
    return [
        Measurement(group, baseline, whole / whole_seconds, "msg/s", note="decoded, as the daemon"),
        Measurement(
            group,
            "read_shards_batch, shard 0 of 4",
            shard / shard_seconds,
            "msg/s",
            baseline,
            note=f"{shard:,} messages of the shard",
        ),
        Measurement(
            group,
            "read_shards_batch, rows passed over",
            whole / shard_seconds,
            "rows/s",
            baseline,
            note="each shard's read passes over the whole publication",
        ),
    ]


# --- latency under load ----------------------------------------------------------------------


def daemons_in_processes(processes: int, shards: int) -> Consumer:
    """A consumer for load_bench.consume_under_load: the daemon in `processes` child
    processes on a subscription of `shards` shards, handlers noting when they ran."""

    @contextlib.contextmanager
    def consumer(url: str, publication: str, handled_at: HandledAt) -> Iterator[None]:
        create(url, publication, shards, {})
        with DaemonProcesses(url, publication, processes, handled=handled_at) as daemons:
            wait_for_leaders(url, publication, shards, daemons)
            with collecting(daemons):
                yield

    return consumer


def latency(url: str, timing: Timing) -> list[Measurement]:
    consumers = {
        UNSHARDED: ("unsharded", daemons_in_processes(1, 1)),
        # Tells what the shards cost from what the second process does.
        ONE_PROCESS: ("one-process", daemons_in_processes(1, 4)),
        TWO_PROCESSES: ("sharded", daemons_in_processes(2, 4)),
    }
    seconds = timing.seconds_by_percent[50]
    with writer_processes(url) as writers:
        solo = solo_rate(writers, timing.solo_seconds)
        runs = {
            variant: consume_under_load(
                url, writers, consumer, f"shard-latency-{tag}", solo / 2, timing, seconds
            )
            for variant, (tag, consumer) in consumers.items()
        }
    measurements = [Measurement("solo rate R", "16 writers, no consumer", solo, "tx/s")]
    for quantile, index in (("p50", 0), ("p99", 2)):
        group = f"latency {quantile} at 50% of R"
        for variant, load in runs.items():
            note = f"wrote {load.written_rate:,.0f}/s"
            if load.unhandled:
                note += f"; {load.unhandled:,} never handled"
            measurements.append(
                Measurement(
                    group,
                    variant,
                    percentiles(load.latencies)[index],
                    "ms",
                    None if variant == UNSHARDED else UNSHARDED,
                    note,
                    higher_is_better=False,
                )
            )
    return measurements
