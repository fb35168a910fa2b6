"""Shards: one subscription led by several processes.

- drain matrix: 1, 4, 16 and 64 shards over 1, 2 and 4 processes (not more processes than
  shards), each on N messages (20,000; OUTBOX_BENCH_SHARDS_MESSAGES sets N, a quick run uses
  1,000), pinned, 4 consumers, 1,000 keys, a plain `def` handler burning 0.3 ms of CPU-bound
  Python a message; every daemon in a process of its own (bench/daemon_processes.py). For
  each: the delivery rate, timed from the commit of the backlog (one transaction, written
  once every process leads its even share of the shards) to the last handler's return, so
  process start and the first hand-over of shards are left out; the database server's CPU
  time per delivered message over that span (bench/server_cpu.py; n/a when the server's
  processes are not readable from here); and the most connections the daemons held on the
  database (bench/held_connections.py). Each against 1 process on an unsharded subscription
  in the same run. A drain during which a shard changed leader (a lease not renewed in time,
  taken again) says so: its rate includes the hand-over. A combination that cannot run is a
  row saying why, never the end of the bench: before it starts, when the connections the
  runs so far say it would hold (fit as so many a process plus so many a shard) are more
  than the server can spare; while it runs, when its daemons go over that, do not share the
  shards within LEAD_TIMEOUT or do not drain within its timeout.
- read: the daemon's own reads (decoded messages) paging through 5 N messages, 500 a page:
  the whole publication (read_batch) against one shard of 4 (read_shards_batch: the same
  keyset read filtered by outbox.message_shard, so it passes over every row to return a
  quarter of them).
- latency: bench/load_bench.py's 16 writer processes at 50% of their solo rate, commit to
  handler: 2 processes on 4 shards, and 1 process on 4 shards (what the shards cost without
  a second process), against 1 process on an unsharded subscription, three interleaved
  rounds of each, p50 and p99 of the rounds pooled (each round's in the note) with their
  ratios to it, all in the same run.
"""

import asyncio
import contextlib
import math
import os
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any

import psycopg

from bench import latency_rounds
from bench.common import Measurement
from bench.daemon_processes import DaemonProcesses, collecting, iterations_for
from bench.held_connections import BENCH_CONNECTION, HeldConnections, connection_budget
from bench.latency_rounds import Round
from bench.load_bench import (
    Consumer,
    HandledAt,
    Timing,
    consume_under_load,
    solo_rate,
    writer_processes,
)
from bench.server_cpu import ServerCpu, ServerNotLocalError
from outbox.positions import START, Position
from poller import operations
from poller.message import Message
from poller.store.message_reads import prepare_reader_async, read_batch_async
from poller.store.shard_reads import read_shards_batch

TITLE = "Shards: one subscription over several processes (CPU-bound handler, reads, latency)"

MESSAGES_VARIABLE = "OUTBOX_BENCH_SHARDS_MESSAGES"
KEYS = 1000
HANDLER_SECONDS = 0.0003
DRAIN_SETTINGS = {"strategy": "pinned", "consumers": 4}
PAGE = 500
READ_PUBLICATION = "read"
READ_FACTOR = 5  # the reads page through this many times a drain's messages

UNSHARDED = "1 process, unsharded"
ONE_PROCESS = "1 process, 4 shards"
TWO_PROCESSES = "2 processes, 4 shards"

FULL_LATENCY = Timing(3.0, {50: 10.0}, sample_every=1.0, drain_timeout=30.0)
# The aim for sharding: p50 and p99 of 1 process on 4 shards within this factor of unsharded.
LATENCY_AIM = 1.25
QUICK_LATENCY = Timing(0.5, {50: 1.0}, sample_every=0.25, drain_timeout=10.0)


def run(database_url: str, quick: bool) -> list[Measurement]:
    count = 1_000 if quick else int(os.environ.get(MESSAGES_VARIABLE, "20000"))
    return (
        drain_matrix(database_url, count)
        + reads(database_url, READ_PUBLICATION, READ_FACTOR * count)
        + latency(
            database_url,
            QUICK_LATENCY if quick else FULL_LATENCY,
            1 if quick else latency_rounds.ROUNDS,
        )
    )


# --- where the shards are --------------------------------------------------------------------


def create(url: str, name: str, shards: int, settings: dict[str, Any]) -> None:
    """A subscription of `name` on the publication of the same name, from its start."""
    with psycopg.connect(url) as conn:
        operations.create(conn, name, name, "start", settings, shards)


def leaders(url: str, name: str) -> list[int]:
    """The pid leading each shard of the current count (alive leases), in shard order."""
    with psycopg.connect(url, autocommit=True, application_name=BENCH_CONNECTION) as conn:
        rows = conn.execute(
            "SELECT l.pid FROM outbox.subscriptions AS s"
            " JOIN outbox.subscription_leaders AS l"
            "   ON l.subscription_id = s.subscription_id AND l.shard_count = s.shard_count"
            " WHERE s.subscription_id = %s AND l.expires_at > clock_timestamp()"
            " ORDER BY l.shard",
            (name,),
        ).fetchall()
    return [row[0] for row in rows]


def leader_tokens(url: str, name: str) -> dict[int, int]:
    """The fencing token of each shard's lease, by shard: a new leader takes a new token."""
    with psycopg.connect(url, autocommit=True, application_name=BENCH_CONNECTION) as conn:
        rows = conn.execute(
            "SELECT l.shard, l.token FROM outbox.subscriptions AS s"
            " JOIN outbox.subscription_leaders AS l"
            "   ON l.subscription_id = s.subscription_id AND l.shard_count = s.shard_count"
            " WHERE s.subscription_id = %s",
            (name,),
        ).fetchall()
    return dict(rows)


def wait_for_leaders(
    url: str,
    name: str,
    shards: int,
    processes: DaemonProcesses,
    timeout: float = 60,
    give_up: threading.Event | None = None,
) -> None:
    """Until every shard is led and each process leads its even share of them; DrainFailedError
    after `timeout` seconds or once `give_up` is set."""
    share = shards // len(processes.pids)
    deadline = time.monotonic() + timeout
    while True:
        led = leaders(url, name)
        if len(led) == shards and all(led.count(pid) == share for pid in processes.pids):
            return
        if give_up is not None and give_up.is_set():
            raise DrainFailedError(f"{len(led)} of {shards} shards led when given up")
        if time.monotonic() > deadline:
            raise DrainFailedError(
                f"{len(led)} of {shards} shards led, not shared within {timeout:g} s"
            )
        time.sleep(0.05)


# --- drain matrix ----------------------------------------------------------------------------


SHARD_COUNTS = (1, 4, 16, 64)
PROCESS_COUNTS = (1, 2, 4)
LEAD_TIMEOUT = 60.0  # seconds for the processes to share the shards evenly
ROOM_WAIT = 30.0  # seconds to wait for the server to have room for a run's connections
SLOWEST_RATE = 200.0  # msg/s: a drain slower than this is cut short as failed


class DrainFailedError(Exception):
    """A combination that did not drain; the message says why."""


def write_backlog(url: str, publication: str, count: int) -> float:
    """`count` messages over KEYS keys in one transaction; when its commit returned."""
    with psycopg.connect(url, application_name=BENCH_CONNECTION) as conn:
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


def variant_name(processes: int, shards: int) -> str:
    if shards == 1:
        return f"{processes} process{'es' if processes > 1 else ''}, unsharded"
    return f"{processes} process{'es' if processes > 1 else ''}, {shards} shards"


@dataclass(frozen=True)
class Drained:
    rate: float  # msg/s
    server_seconds: float | None  # the server's CPU time over the drain, None: not readable
    handed_over: int  # shards whose leader changed during the drain (a lease lost, taken)


@dataclass(frozen=True)
class Outcome:
    processes: int
    shards: int
    held: int  # the most connections the daemons held, 0 when never started
    drained: Drained | None = None
    failure: str = ""  # "failed: why" or "not run: why"


def drain_once(
    url: str, processes: int, shards: int, count: int, iterations: int, cpu: ServerCpu | None
) -> Outcome:
    name = drained(processes, shards)
    # Every drain starts on an empty table.
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("TRUNCATE outbox.messages")
    create(url, name, shards, DRAIN_SETTINGS)
    timeout = 30 + count / SLOWEST_RATE
    with HeldConnections(url, connection_budget(url)[0]) as held:
        try:
            with DaemonProcesses(url, name, processes, iterations) as daemons:
                wait_for_leaders(url, name, shards, daemons, LEAD_TIMEOUT, held.over_budget)
                tokens = leader_tokens(url, name)
                committed_at = write_backlog(url, name, count)
                before = cpu.ticks() if cpu else {}
                while daemons.collect() < count:
                    if held.over_budget.is_set():
                        raise DrainFailedError("over the connection budget")
                    if time.monotonic() > committed_at + timeout:
                        raise DrainFailedError(
                            f"{len(daemons.handled):,} handled in {timeout:.0f} s"
                        )
                    time.sleep(0.05)
                server = ServerCpu.seconds_between(before, cpu.ticks()) if cpu else None
                finished_at = max(daemons.handled.values())
                now = leader_tokens(url, name)
                handed_over = sum(1 for shard, token in tokens.items() if now.get(shard) != token)
        except (DrainFailedError, OSError, EOFError, psycopg.Error) as error:
            # A child that died shows as an EOFError, which says nothing by itself.
            why = str(error) or f"{type(error).__name__} (a daemon process ended)"
            if held.over_budget.is_set():
                why = over_budget(held)
            return Outcome(processes, shards, held.most, failure=f"failed: {why}")
    rate = count / (finished_at - committed_at)
    return Outcome(processes, shards, held.most, Drained(rate, server, handed_over))


def over_budget(held: HeldConnections) -> str:
    return f"held {held.most} connections, over the {held.budget} the server could spare"


ConnectionFit = tuple[float, float]  # connections a process, connections a shard


def fit_connections(outcomes: list[Outcome]) -> ConnectionFit | None:
    """Least squares of held = a * processes + b * shards over the runs that drained, or
    None while they cannot tell a from b. Fit on what the daemon did, not on its design, so
    it follows whatever the daemon opens."""
    runs = [(o.processes, o.shards, o.held) for o in outcomes if o.drained]
    pp = sum(p * p for p, _, _ in runs)
    ps = sum(p * s for p, s, _ in runs)
    ss = sum(s * s for _, s, _ in runs)
    ph = sum(p * h for p, _, h in runs)
    sh = sum(s * h for _, s, h in runs)
    determinant = pp * ss - ps * ps
    if not determinant:
        return None
    return (ph * ss - ps * sh) / determinant, (pp * sh - ps * ph) / determinant


def refused(url: str, processes: int, shards: int, fit: ConnectionFit | None) -> str:
    """Why the combination is not started, or "" to start it: once the server has room for
    the connections it is expected to hold, waiting up to ROOM_WAIT seconds for others (tests
    on a shared server) to free some."""
    if fit is None:
        return ""
    per_process, per_shard = fit
    expected = per_process * processes + per_shard * shards
    deadline = time.monotonic() + ROOM_WAIT
    while True:
        spare, idle_server = connection_budget(url)
        if expected <= spare:
            return ""
        if expected > idle_server or time.monotonic() > deadline:
            break
        time.sleep(1)
    return (
        f"not run: would hold ~{expected:.0f} connections ({per_process:.1f} a process"
        f" + {per_shard:.1f} a shard, fit on the runs above), the server could spare {spare}"
        f" ({idle_server} if nobody else used it)"
    )


def combinations() -> list[tuple[int, int]]:
    return [
        (processes, shards)
        for shards in SHARD_COUNTS
        for processes in PROCESS_COUNTS
        if processes <= shards
    ]


def drain_matrix(url: str, count: int) -> list[Measurement]:
    iterations = iterations_for(HANDLER_SECONDS)
    try:
        cpu: ServerCpu | None = ServerCpu(url)
        cpu_unreadable = ""
    except ServerNotLocalError as unreadable:
        cpu, cpu_unreadable = None, f"n/a: {unreadable}"
    outcomes: list[Outcome] = []
    try:
        for processes, shards in combinations():
            reason = refused(url, processes, shards, fit_connections(outcomes))
            if reason:
                outcomes.append(Outcome(processes, shards, 0, failure=reason))
            else:
                outcomes.append(drain_once(url, processes, shards, count, iterations, cpu))
    finally:
        if cpu:
            cpu.close()
    return matrix_rows(outcomes, count, cpu_unreadable)


def matrix_rows(outcomes: list[Outcome], count: int, cpu_unreadable: str) -> list[Measurement]:
    rates = {(o.processes, o.shards): o.drained.rate for o in outcomes if o.drained}
    where = f"drain {count:,}, pinned, {KEYS:,} keys, 0.3 ms CPU each"
    groups = (f"{where}: rate", f"{where}: server CPU", f"{where}: connections")
    rate_rows, cpu_rows, connection_rows = [], [], []
    for o in outcomes:
        name = variant_name(o.processes, o.shards)
        baseline = None if name == UNSHARDED else UNSHARDED
        if o.held:  # also of a run that failed: how many it had when it did
            connection_rows.append(
                Measurement(groups[2], name, o.held, "held", baseline, o.failure, False)
            )
        if not o.drained:
            rate_rows.append(Measurement(groups[0], name, math.nan, "msg/s", baseline, o.failure))
            continue
        one_process = rates.get((1, o.shards))
        notes = []
        if o.processes > 1 and one_process:
            notes.append(f"{o.drained.rate / one_process:.2f}x of 1 process")
        if o.drained.handed_over:  # hand-overs in the timed span: a slower, noisier figure
            notes.append(f"leader changed on {o.drained.handed_over} of {o.shards} shards")
        note = "; ".join(notes)
        rate_rows.append(Measurement(groups[0], name, o.drained.rate, "msg/s", baseline, note))
        seconds = o.drained.server_seconds
        per_message = math.nan if seconds is None else seconds / count * 1e6
        cpu_rows.append(
            Measurement(groups[1], name, per_message, "us/msg", baseline, cpu_unreadable, False)
        )
    return rate_rows + cpu_rows + connection_rows


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
    publication, then shard 0 of 4 (of the subscription of the same name)."""
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        await prepare_reader_async(conn)

        async def whole(after: Position) -> list[Message]:
            return await read_batch_async(conn, publication, after, PAGE)

        async def shard(after: Position) -> list[Message]:
            batch = await read_shards_batch(
                conn, publication, publication, 4, [0], after, PAGE, None
            )
            return [message for _, message in batch.messages]

        return await fastest(whole), await fastest(shard)


def reads(url: str, publication: str, count: int) -> list[Measurement]:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("TRUNCATE outbox.messages")
    write_backlog(url, publication, count)
    create(url, publication, 4, {})  # a shard reads as far as its subscription's row lets it
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


def latency(url: str, timing: Timing, rounds: int) -> list[Measurement]:
    consumers = {
        UNSHARDED: ("unsharded", daemons_in_processes(1, 1)),
        # Tells what the shards cost from what the second process does.
        ONE_PROCESS: ("one-process", daemons_in_processes(1, 4)),
        TWO_PROCESSES: ("sharded", daemons_in_processes(2, 4)),
    }
    seconds = timing.seconds_by_percent[50]
    its_rounds: dict[str, list[Round]] = {variant: [] for variant in consumers}
    with writer_processes(url) as writers:
        solo = solo_rate(writers, timing.solo_seconds)
        for number in range(rounds):
            for variant, (tag, consumer) in consumers.items():
                publication = f"shard-latency-{number}-{tag}"
                load = consume_under_load(
                    url, writers, consumer, publication, solo / 2, timing, seconds
                )
                its_rounds[variant].append(
                    Round(load.latencies, [], len(load.committed), load.seconds, load.unhandled)
                )
    measurements = [Measurement("solo rate R", "16 writers, no consumer", solo, "tx/s")]
    aims = {quantile: f"aim <= {LATENCY_AIM:g}x" for quantile in ("p50", "p99")}
    # The aim is for one process on 4 shards; the second process's figures are a contrast.
    return measurements + latency_rounds.rows(
        its_rounds, UNSHARDED, "50% of R", aims=aims, aimed={ONE_PROCESS}
    )
