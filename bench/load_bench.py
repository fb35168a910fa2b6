"""Commit-to-handler latency under load: 16 writer processes at 50% and 90% of their solo rate.

First the writers run flat out with no consumer, one `outbox.append` per transaction: their
solo rate R. Then, at each load level, the writers follow a schedule of absolute times that
adds up to that share of R, and three consumers take turns, each on its own fresh publication:
a bare loop running the `read_batch` query every 1 ms (the floor for polling, the baseline),
and the daemon with a plain `def` handler and with an `async def` one. Every writer records
when each of its commits returned; every consumer records when it had each message.

At a fixed rate besides (bench/fixed_rate.py): 16 writers paced at 1,000 tx/s in total, three
interleaved rounds of the three consumers, and each message's wait split into its parts (until
the safe frontier passes it, until a read returns it, until its handler runs).

Lag is not sampled live (the commits happen in other processes): it is counted afterwards
from those times, once a sample interval, as messages committed minus messages handled by
then, and a least-squares line through the samples says whether it grew.

Consumers read only below the safe frontier, which is the oldest transaction open anywhere
on the server, in any database: a long transaction elsewhere on the same server shows here
as seconds of latency for every consumer alike. Run it on a server nothing else uses.

One clock for all: time.monotonic() is CLOCK_MONOTONIC on Linux (time.get_clock_info says
so), which counts from boot for the whole system, so a writer's commit time and a consumer's
handling time in another process are on the same scale.
"""

import bisect
import contextlib
import multiprocessing
import statistics
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from multiprocessing.connection import Connection as Pipe
from multiprocessing.context import ForkServerContext

import psycopg
from psycopg.rows import TupleRow

import outbox
from bench import fixed_rate
from bench.common import Measurement, percentiles
from outbox.positions import START
from poller import administration
from poller.daemon.background import DaemonThread
from poller.daemon.handlers import Handler
from poller.message import Message
from poller.store.message_reads import prepare_reader, read_batch

TITLE = "Load: commit-to-handler latency with 16 writer processes at a share of their solo rate"

WRITERS = 16
BATCH = 500
BARE_LOOP = "read_batch every 1 ms"
SYNC_DAEMON = "daemon, def handler"
ASYNC_DAEMON = "daemon, async def handler"
SOLO = f"{WRITERS} writers, no consumer"

# A consumer that handles less than this share of what is written falls behind for good.
GROWTH_TOLERANCE = 0.01

Conn = psycopg.Connection[TupleRow]
HandledAt = dict[str, float]  # monotonic time by message id


@dataclass(frozen=True)
class Timing:
    solo_seconds: float
    seconds_by_percent: dict[int, float]
    sample_every: float  # seconds between lag samples
    drain_timeout: float  # how long consumers get to catch up once the writers stop


FULL = Timing(5.0, {50: 15.0, 90: 30.0}, sample_every=1.0, drain_timeout=30.0)
QUICK = Timing(0.5, {50: 0.5, 90: 1.0}, sample_every=0.25, drain_timeout=10.0)


# --- writer processes ------------------------------------------------------------------------


@dataclass(frozen=True)
class FlatOut:
    """Commit as fast as possible until `end`; count only the commits in [start, end)."""

    publication: str
    start: float
    end: float

    def run(self, conn: Conn, writer: int) -> int:
        committed = 0
        n = 0
        while True:
            outbox.append(conn, self.publication, "Loaded", {"writer": writer, "n": n})
            conn.commit()
            n += 1
            now = time.monotonic()
            if now >= self.end:
                return committed
            if now >= self.start:
                committed += 1


@dataclass(frozen=True)
class Paced:
    """Commit at `rate` per second from `start` to `end`; returns (message id, commit time).

    Each commit is due at an absolute time, so a late wake-up is made up by the next commits
    instead of pushing every later one back, and the rate does not drift with sleep jitter.
    """

    publication: str
    rate: float  # this writer's share of the total
    start: float
    end: float

    def run(self, conn: Conn, writer: int) -> list[tuple[str, float]]:
        interval = 1 / self.rate
        # Writers are offset by a fraction of the interval, so the total arrives evenly
        # rather than in bursts of 16 commits at once.
        offset = writer / WRITERS
        committed: list[tuple[str, float]] = []
        n = 0
        while (due := self.start + (n + offset) * interval) < self.end:
            wait = due - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            message_id = f"{self.publication}-{writer}-{n}"
            outbox.append(conn, self.publication, "Loaded", {"n": n}, message_id=message_id)
            conn.commit()
            committed.append((message_id, time.monotonic()))
            n += 1
        return committed


def _writer(url: str, writer: int, commands: Pipe) -> None:
    """A writer process: one connection, kept from run to run, running what it is sent."""
    with psycopg.connect(url) as conn:
        while command := commands.recv():
            commands.send(command.run(conn, writer))


@contextlib.contextmanager
def writer_processes(url: str) -> Iterator[list[Pipe]]:
    context = multiprocessing.get_context("forkserver")
    assert isinstance(context, ForkServerContext)
    # Imported once in the fork server, so 16 writers start by fork, not 16 interpreters
    # importing psycopg and the daemon on 2 cores.
    context.set_forkserver_preload([__name__])
    pipes = [context.Pipe() for _ in range(WRITERS)]
    processes = [
        context.Process(target=_writer, args=(url, writer, child))
        for writer, (_, child) in enumerate(pipes)
    ]
    for process in processes:
        process.start()
    for _, child in pipes:
        # Only the writer may hold its end: a writer that dies then reads as EOFError here
        # instead of leaving the parent waiting for its answer forever.
        child.close()
    try:
        yield [parent for parent, _ in pipes]
    finally:
        for parent, _ in pipes:
            with contextlib.suppress(OSError):  # that writer is already gone
                parent.send(None)
        for process in processes:
            process.join(timeout=10)
            if process.is_alive():
                process.kill()


def solo_rate(writers: list[Pipe], seconds: float) -> float:
    # Everything the writers do before `start` (waking up, the first prepared statements) is
    # warm-up; CLOCK_MONOTONIC makes `start` the same instant in every process.
    start = time.monotonic() + 0.5
    for pipe in writers:
        pipe.send(FlatOut("load-solo", start, start + seconds))
    committed: int = sum(pipe.recv() for pipe in writers)
    if not committed:
        raise RuntimeError(f"{WRITERS} writers committed nothing in {seconds:g} s")
    return committed / seconds


def write_paced(
    writers: list[Pipe], publication: str, rate: float, seconds: float
) -> tuple[float, dict[str, float]]:
    """The schedule's start, and commit time by message id of everything written."""
    start = time.monotonic() + 0.2  # time for every writer to get its command
    for pipe in writers:
        pipe.send(Paced(publication, rate / len(writers), start, start + seconds))
    committed: dict[str, float] = {}
    for pipe in writers:
        committed.update(pipe.recv())
    return start, committed


# --- consumers -------------------------------------------------------------------------------

Consumer = Callable[[str, str, HandledAt], AbstractContextManager[None]]


@contextlib.contextmanager
def bare_loop(url: str, publication: str, handled_at: HandledAt) -> Iterator[None]:
    """The query every 1 ms in a thread, as `raw_poll_latency` in poller_bench does."""
    stop = threading.Event()

    def poll() -> None:
        after = START
        with psycopg.connect(url, autocommit=True) as conn:
            prepare_reader(conn)  # the read connection as the daemon sets it up
            while not stop.is_set():
                for message in read_batch(conn, publication, after, BATCH):
                    handled_at[message.message_id] = time.monotonic()
                    after = message.at
                time.sleep(0.001)

    thread = threading.Thread(target=poll, name="bare-loop")
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def sync_handler(handled_at: HandledAt) -> Handler:
    def handle(message: Message) -> None:
        handled_at[message.message_id] = time.monotonic()

    return handle


def async_handler(handled_at: HandledAt) -> Handler:
    async def handle(message: Message) -> None:
        handled_at[message.message_id] = time.monotonic()

    return handle


def daemon_with(make_handler: Callable[[HandledAt], Handler]) -> Consumer:
    @contextlib.contextmanager
    def daemon(url: str, publication: str, handled_at: HandledAt) -> Iterator[None]:
        with psycopg.connect(url) as conn:
            administration.create(conn, publication, publication, "start", {})
        with DaemonThread(url, [publication], make_handler(handled_at)):
            yield

    return daemon


CONSUMERS: dict[str, tuple[str, Consumer]] = {
    BARE_LOOP: ("bare", bare_loop),
    SYNC_DAEMON: ("sync", daemon_with(sync_handler)),
    ASYNC_DAEMON: ("async", daemon_with(async_handler)),
}


def wait_until(done: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


# --- one run: a consumer under paced writers -------------------------------------------------


@dataclass(frozen=True)
class Run:
    seconds: float
    start: float
    committed: dict[str, float]  # commit time by message id
    handled_at: HandledAt

    @property
    def latencies(self) -> list[float]:
        return [self.handled_at[k] - t for k, t in self.committed.items() if k in self.handled_at]

    @property
    def unhandled(self) -> int:
        return sum(1 for k in self.committed if k not in self.handled_at)

    @property
    def written_rate(self) -> float:
        return len(self.committed) / self.seconds

    def lag_samples(self, every: float) -> tuple[list[float], list[int]]:
        """(seconds into the run, messages committed but not yet handled) once per `every`."""
        commits = sorted(self.committed.values())
        # A consumer can see a message before its writer sees the commit return; such a
        # message counts as handled at its commit time, so the lag never goes below zero.
        handled = sorted(
            max(self.handled_at[k], t) for k, t in self.committed.items() if k in self.handled_at
        )
        times = [every * i for i in range(1, int(self.seconds / every + 1e-9) + 1)]
        lags = [
            bisect.bisect_right(commits, self.start + t)
            - bisect.bisect_right(handled, self.start + t)
            for t in times
        ]
        return times, lags


def consume_under_load(
    url: str,
    writers: list[Pipe],
    consumer: Consumer,
    publication: str,
    rate: float,
    timing: Timing,
    seconds: float,
) -> Run:
    # Every run starts on an empty table, so none reads behind rows an earlier one left.
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("TRUNCATE outbox.messages")
    handled_at: HandledAt = {}
    with consumer(url, publication, handled_at):
        # The consumer counts as started once it handled a first message.
        with psycopg.connect(url) as conn:
            outbox.append(conn, publication, "Probe", {}, message_id="probe")
        if not wait_until(lambda: "probe" in handled_at, timeout=60):
            raise RuntimeError(f"{publication}: the consumer did not start within 60 s")
        start, committed = write_paced(writers, publication, rate, seconds)
        # Only this publication's messages reach handled_at, the probe and the committed ones,
        # so a count says when all are in (and costs the consumer no GIL time, unlike a scan).
        wait_until(lambda: len(handled_at) > len(committed), timing.drain_timeout)
    return Run(seconds, start, committed, handled_at)


# --- the table -------------------------------------------------------------------------------


def run(database_url: str, quick: bool) -> list[Measurement]:
    timing = QUICK if quick else FULL
    with writer_processes(database_url) as writers:
        at_fixed_rate = fixed_rate_rounds(database_url, writers, timing, quick)
        solo = solo_rate(writers, timing.solo_seconds)
        runs = {
            (percent, variant): consume_under_load(
                database_url,
                writers,
                consumer,
                f"load-{percent}-{tag}",
                solo * percent / 100,
                timing,
                seconds,
            )
            for percent, seconds in timing.seconds_by_percent.items()
            for variant, (tag, consumer) in CONSUMERS.items()
        }
    measurements = [Measurement("solo rate R", SOLO, solo, "tx/s", note="outbox.append per tx")]
    for percent in timing.seconds_by_percent:
        measurements += latency_rows(percent, solo, runs)
        measurements += lag_rows(percent, runs, timing.sample_every)
    return measurements + fixed_rate.rows(at_fixed_rate, BARE_LOOP)


def fixed_rate_rounds(
    url: str, writers: list[Pipe], timing: Timing, quick: bool
) -> dict[str, list[fixed_rate.Round]]:
    """The fixed-rate setting (bench/fixed_rate.py): rounds of every consumer in turn."""
    seconds = fixed_rate.QUICK_SECONDS if quick else fixed_rate.FULL_SECONDS
    # Untimed: on a fresh database the first consumer's run had p99 of 10-12 ms, half of it
    # behind the frontier (new tables, cold caches), which no later round showed.
    consume_under_load(url, writers, bare_loop, "fixed-warm-up", fixed_rate.RATE, timing, seconds)
    rounds: dict[str, list[fixed_rate.Round]] = {variant: [] for variant in CONSUMERS}
    for number in range(fixed_rate.ROUNDS):
        for variant, (tag, consumer) in CONSUMERS.items():
            publication = f"fixed-{number}-{tag}"
            read_at: dict[str, float] = {}
            with fixed_rate.reads_timed(read_at):
                load = consume_under_load(
                    url, writers, consumer, publication, fixed_rate.RATE, timing, seconds
                )
            if variant == BARE_LOOP:
                read_at = load.handled_at  # it handles a row where it reads it
            ids = fixed_rate.transaction_ids(url, publication)
            parts = fixed_rate.breakdowns(load.committed, ids, read_at, load.handled_at)
            rounds[variant].append(
                fixed_rate.Round(
                    load.latencies, parts, len(load.committed), load.seconds, load.unhandled
                )
            )
    return rounds


AIMS = {(50, SYNC_DAEMON, "p50"): "aim p50 <= 3 ms", (50, SYNC_DAEMON, "p99"): "aim p99 <= 15 ms"}


def latency_rows(percent: int, solo: float, runs: dict[tuple[int, str], Run]) -> list[Measurement]:
    figures: dict[str, dict[str, float]] = {}
    for variant in CONSUMERS:
        latencies = runs[percent, variant].latencies
        figures[variant] = dict(
            zip(("p50", "p95", "p99"), percentiles(latencies), strict=True),
            max=max(latencies) * 1000,
        )
    measurements = []
    for quantile in ("p50", "p95", "p99", "max"):
        group = f"{quantile} at {percent}% of R"
        for variant in CONSUMERS:
            notes = [AIMS.get((percent, variant, quantile), "")]
            if quantile == "p50":  # once per run: what the writers managed, what was missed
                load = runs[percent, variant]
                notes.append(f"wrote {load.written_rate:,.0f}/s of {solo * percent / 100:,.0f}")
                if load.unhandled:
                    notes.append(f"{load.unhandled:,} never handled")
            measurements.append(
                Measurement(
                    group,
                    variant,
                    figures[variant][quantile],
                    "ms",
                    None if variant == BARE_LOOP else BARE_LOOP,
                    "; ".join(n for n in notes if n),
                    higher_is_better=False,
                )
            )
    return measurements


def lag_rows(percent: int, runs: dict[tuple[int, str], Run], every: float) -> list[Measurement]:
    """Lag growth, msg/s: the slope of a least-squares line through the lag samples."""
    measurements = []
    for variant in CONSUMERS:
        load = runs[percent, variant]
        times, lags = load.lag_samples(every)
        slope = statistics.linear_regression(times, lags).slope
        # Lag that grows by more than a sliver of the write rate means handling falls behind.
        verdict = "grew" if slope > GROWTH_TOLERANCE * load.written_rate else "flat"
        note = f"aim: flat; {verdict}: lag {lags[0]:,} -> {lags[-1]:,} msgs in {load.seconds:g} s"
        measurements.append(
            Measurement(f"lag growth at {percent}% of R", variant, slope, "msg/s", note=note)
        )
    return measurements
