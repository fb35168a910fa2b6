"""Commit-to-handler latency under load: 16 writer processes at a share of their solo rate and
at fixed rates, and a queued backlog drained from the consumer's start.

First the writers run flat out with no consumer, one `outbox.append` per transaction: their
solo rate R. Then, in every setting, the writers follow a schedule of absolute times that adds
up to the setting's rate, and the consumers take turns, three interleaved rounds of each
(a drift in the machine's load falls on all alike), each run on its own fresh publication:
- at 50% and 90% of R: a bare loop running the `read_batch` query every 1 ms (the floor for
  polling, the baseline), and the daemon with a plain `def` handler and with an `async def`
  one;
- at 1,000 tx/s: those three, `outbox poll` as a user starts it (its own process, a `def`
  handler noting the time) and eventsourcing's follower, its writers saving through
  eventsourcing's application (bench/eventsourcing_follower.py; the second baseline);
- at 3,000 tx/s: the bare loop and the daemon with a `def` handler;
- a backlog of 100,000 messages queued before the consumer starts, drained by `outbox poll`
  and by eventsourcing's follower, timed from the start of the consumer's process.
Every writer records when each of its commits returned; every consumer records when it had
each message. Each message's wait is split into its parts where the consumer runs in this
process (bench/fixed_rate.py: until the safe frontier passes it, until a read returns it,
until its handler runs).

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
from dataclasses import dataclass, field
from multiprocessing.connection import Connection as Pipe
from multiprocessing.context import ForkServerContext
from typing import Any, Protocol

import psycopg
from psycopg.rows import TupleRow

import outbox
from bench import consumer_processes, eventsourcing_follower, latency_rounds, poller_bench
from bench.common import Measurement, percentiles
from bench.latency_rounds import Round
from outbox.positions import START
from poller import operations
from poller.daemon.background import DaemonThread
from poller.daemon.handlers import Handler
from poller.message import Message
from poller.store.message_reads import prepare_reader, read_batch

TITLE = "Load: commit-to-handler latency with 16 writer processes, and a backlog from the start"

WRITERS = 16
BATCH = 500
BARE_LOOP = "read_batch every 1 ms"
SYNC_DAEMON = "daemon, def handler"
ASYNC_DAEMON = "daemon, async def handler"
OUTBOX_POLL = "`outbox poll`, def handler"
FOLLOWER = "eventsourcing's follower"
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


# Per round at each share of R.
FULL = Timing(5.0, {50: 10.0, 90: 10.0}, sample_every=1.0, drain_timeout=30.0)
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
    """Commit at `rate` per second from `start` to `end`; returns (message id, the time the
    commit was due, commit time) for each.

    Each commit is due at an absolute time, so a late wake-up is made up by the next commits
    instead of pushing every later one back, and the rate does not drift with sleep jitter.
    """

    publication: str
    rate: float  # this writer's share of the total
    start: float
    end: float

    def run(self, conn: Conn, writer: int) -> list[tuple[str, float, float]]:
        interval = 1 / self.rate
        # Writers are offset by a fraction of the interval, so the total arrives evenly
        # rather than in bursts of 16 commits at once.
        offset = writer / WRITERS
        committed: list[tuple[str, float, float]] = []
        n = 0
        while (due := self.start + (n + offset) * interval) < self.end:
            wait = due - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            message_id = f"{self.publication}-{writer}-{n}"
            outbox.append(conn, self.publication, "Loaded", {"n": n}, message_id=message_id)
            conn.commit()
            committed.append((message_id, due, time.monotonic()))
            n += 1
        return committed


class Command(Protocol):
    """What a writer process runs, on its one connection, and sends back."""

    def run(self, conn: Conn, writer: int) -> Any: ...


@dataclass(frozen=True)
class Source:
    """Where the writers write and the consumer reads."""

    empty: Callable[[str], None]
    """Empties the table before a run, so none reads behind rows an earlier one left."""
    probe: Callable[[str, str], str]
    """Writes one message to the publication; the id the consumer knows it by."""
    paced: Callable[[str, str, float, float, float], Command]
    """The writers' command: (url, publication, rate per writer, start, end)."""


def _empty_outbox(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("TRUNCATE outbox.messages")


def _outbox_probe(url: str, publication: str) -> str:
    with psycopg.connect(url) as conn:
        outbox.append(conn, publication, "Probe", {}, message_id="probe")
    return "probe"


def _eventsourcing_probe(url: str, publication: str) -> str:
    message_id = f"{publication}-probe"
    eventsourcing_follower.fill_with(url, [message_id])
    return str(eventsourcing_follower.event_id(message_id))


OUTBOX = Source(
    _empty_outbox,
    _outbox_probe,
    lambda _url, publication, rate, start, end: Paced(publication, rate, start, end),
)
EVENTSOURCING = Source(
    eventsourcing_follower.empty_table,
    _eventsourcing_probe,
    lambda url, publication, rate, start, end: eventsourcing_follower.PacedEvents(
        url, publication, rate, start, end, WRITERS
    ),
)


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
    url: str,
    writers: list[Pipe],
    publication: str,
    rate: float,
    seconds: float,
    source: Source = OUTBOX,
) -> tuple[float, dict[str, float], dict[str, float]]:
    """The schedule's start, and commit time and due time by message id of everything
    written."""
    start = time.monotonic() + 0.2  # time for every writer to get its command
    for pipe in writers:
        pipe.send(source.paced(url, publication, rate / len(writers), start, start + seconds))
    committed: dict[str, float] = {}
    due: dict[str, float] = {}
    for pipe in writers:
        for message_id, due_at, committed_at in pipe.recv():
            committed[message_id] = committed_at
            due[message_id] = due_at
    return start, committed, due


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
            operations.create(conn, publication, publication, "start", {})
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
    due: dict[str, float] = field(default_factory=dict)  # when each commit was due to start

    @property
    def from_due(self) -> list[float]:
        """From when each write was due (the writer's wish to write) to its handler: what a
        writer's wait for a lock adds shows here, not in `latencies`."""
        return [self.handled_at[k] - t for k, t in self.due.items() if k in self.handled_at]

    @property
    def latencies(self) -> list[float]:
        return [self.handled_at[k] - t for k, t in self.committed.items() if k in self.handled_at]

    @property
    def unhandled(self) -> int:
        return sum(1 for k in self.committed if k not in self.handled_at)

    @property
    def writing_seconds(self) -> float:
        """From the schedule's start to the last commit, or the schedule's length if longer:
        writers that cannot keep the rate (eventsourcing's, each waiting for its table lock)
        commit past its end."""
        last = max(self.committed.values(), default=self.start)
        return max(self.seconds, last - self.start)

    @property
    def written_rate(self) -> float:
        return len(self.committed) / self.writing_seconds

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
    source: Source = OUTBOX,
) -> Run:
    # Every run starts on an empty table, so none reads behind rows an earlier one left.
    source.empty(url)
    handled_at: HandledAt = {}
    with consumer(url, publication, handled_at):
        # The consumer counts as started once it handled a first message.
        probe = source.probe(url, publication)
        if not wait_until(lambda: probe in handled_at, timeout=60):
            raise RuntimeError(f"{publication}: the consumer did not start within 60 s")
        start, committed, due = write_paced(url, writers, publication, rate, seconds, source)
        # Only this publication's messages reach handled_at, the probe and the committed ones,
        # so a count says when all are in (and costs the consumer no GIL time, unlike a scan).
        wait_until(lambda: len(handled_at) > len(committed), timing.drain_timeout)
    return Run(seconds, start, committed, handled_at, due)


# --- the settings ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Contender:
    tag: str  # in its publications' names
    consumer: Consumer
    source: Source = OUTBOX


IN_PROCESS = {variant: Contender(tag, consumer) for variant, (tag, consumer) in CONSUMERS.items()}
AT_FIXED_RATE = {
    **IN_PROCESS,
    OUTBOX_POLL: Contender("poll", consumer_processes.outbox_poll()),
    FOLLOWER: Contender("follower", consumer_processes.eventsourcing_follower(), EVENTSOURCING),
}
AT_HIGH_RATE = {variant: IN_PROCESS[variant] for variant in (BARE_LOOP, SYNC_DAEMON)}
BACKLOG = 100_000
QUICK_BACKLOG = 2_000

Rounds = dict[str, list[Round]]
Runs = dict[str, list[Run]]


def run(database_url: str, quick: bool) -> list[Measurement]:
    timing = QUICK if quick else FULL
    seconds = latency_rounds.QUICK_SECONDS if quick else latency_rounds.FULL_SECONDS
    rounds = 1 if quick else latency_rounds.ROUNDS
    fixed, high = latency_rounds.RATE, latency_rounds.HIGH_RATE
    with writer_processes(database_url) as writers:
        # Untimed: on a fresh database the first consumer's run had p99 of 10-12 ms, half of
        # it behind the frontier (new tables, cold caches), which no later round showed.
        consume_under_load(database_url, writers, bare_loop, "warm-up", fixed, timing, seconds)
        # The writers' eventsourcing application too: made at its first save, it took the
        # first round's first second (connections, type adapters) from every writer.
        follower = AT_FIXED_RATE[FOLLOWER]
        consume_under_load(
            database_url, writers, follower.consumer, "warm-up", fixed, timing, 1.0, follower.source
        )

        def rounds_of(contenders: dict[str, Contender], rate: float, name: str) -> Rounds:
            at_rate, _ = rounds_at(
                database_url, writers, contenders, rate, timing, seconds, rounds, name
            )
            return at_rate

        at_fixed_rate = rounds_of(AT_FIXED_RATE, fixed, "fixed")
        at_high_rate = rounds_of(AT_HIGH_RATE, high, "high")
        solo = solo_rate(writers, timing.solo_seconds)
        shares = {
            percent: rounds_at(
                database_url,
                writers,
                IN_PROCESS,
                solo * percent / 100,
                timing,
                timing.seconds_by_percent[percent],
                rounds,
                f"load-{percent}",
            )
            for percent in timing.seconds_by_percent
        }
    backlog = QUICK_BACKLOG if quick else BACKLOG
    drained = drain_rounds(database_url, backlog, rounds, timing)
    measurements = [Measurement("solo rate R", SOLO, solo, "tx/s", note="outbox.append per tx")]
    aims = {"p50": "aim <= 1.5x", "p99": "aim <= 2x"}
    for percent, (its_rounds, its_runs) in shares.items():
        setting = f"{percent}% of R"
        quantiles = ("p50", "p95", "p99")
        measurements += latency_rounds.rows(its_rounds, BARE_LOOP, setting, quantiles, aims)
        measurements += lag_rows(percent, its_runs, timing.sample_every)
    measurements += lower_rate_rows({p: r for p, (r, _) in shares.items()})
    measurements += latency_rounds.rows(at_fixed_rate, BARE_LOOP, f"{fixed:,.0f} tx/s")
    measurements += against_follower(at_fixed_rate, f"{fixed:,.0f} tx/s")
    high_aims = {"p99": "aim <= 2x"}
    high_rows = latency_rounds.rows(at_high_rate, BARE_LOOP, f"{high:,.0f} tx/s", aims=high_aims)
    measurements += high_rows
    return measurements + drain_rows(drained, backlog)


def rounds_at(
    url: str,
    writers: list[Pipe],
    contenders: dict[str, Contender],
    rate: float,
    timing: Timing,
    seconds: float,
    rounds: int,
    name: str,
) -> tuple[Rounds, Runs]:
    """`rounds` interleaved rounds of every contender at `rate`, each on a fresh publication."""
    its_rounds: Rounds = {variant: [] for variant in contenders}
    its_runs: Runs = {variant: [] for variant in contenders}
    for number in range(rounds):
        for variant, contender in contenders.items():
            publication = f"{name}-{number}-{contender.tag}"
            read_at: dict[str, float] = {}
            with latency_rounds.reads_timed(read_at):
                load = consume_under_load(
                    url,
                    writers,
                    contender.consumer,
                    publication,
                    rate,
                    timing,
                    seconds,
                    contender.source,
                )
            if variant == BARE_LOOP:
                read_at = load.handled_at  # it handles a row where it reads it
            parts = []
            if read_at:  # a consumer in this process
                ids = latency_rounds.transaction_ids(url, publication)
                parts = latency_rounds.breakdowns(load.committed, ids, read_at, load.handled_at)
            its_rounds[variant].append(
                Round(
                    load.latencies,
                    parts,
                    len(load.committed),
                    load.writing_seconds,
                    load.unhandled,
                    load.from_due,
                )
            )
            its_runs[variant].append(load)
    return its_rounds, its_runs


def lag_rows(percent: int, runs: Runs, every: float) -> list[Measurement]:
    """Lag growth, msg/s: the slope of a least-squares line through the lag samples, the
    steepest of the rounds."""
    measurements = []
    for variant, its_runs in runs.items():
        slopes, verdicts = [], []
        for load in its_runs:
            times, lags = load.lag_samples(every)
            slope = statistics.linear_regression(times, lags).slope
            slopes.append(slope)
            # Lag that grows by more than a sliver of the write rate: handling falls behind.
            grew = slope > GROWTH_TOLERANCE * load.written_rate
            verdicts.append(f"{'grew' if grew else 'flat'} {lags[0]:,} -> {lags[-1]:,}")
        note = f"aim: flat; lag in msgs, each round: {', '.join(verdicts)}"
        measurements.append(
            Measurement(f"lag growth at {percent}% of R", variant, max(slopes), "msg/s", note=note)
        )
    return measurements


def lower_rate_rows(shares: dict[int, Rounds]) -> list[Measurement]:
    """The async def handler at the lower share against itself at the higher one: a
    scheduling fault once made it slower with fewer messages to handle."""
    lower, higher = min(shares), max(shares)
    measurements = []
    for quantile in ("p50", "p99"):
        group = f"{ASYNC_DAEMON}, {quantile}: {lower}% against {higher}% of R"
        base, low = f"at {higher}% of R", f"at {lower}% of R"
        measurements += [
            Measurement(
                group,
                base,
                latency_rounds.pooled(shares[higher][ASYNC_DAEMON], quantile),
                "ms",
                higher_is_better=False,
            ),
            Measurement(
                group,
                low,
                latency_rounds.pooled(shares[lower][ASYNC_DAEMON], quantile),
                "ms",
                base,
                "aim <= 1x: never slower at a lower rate",
                higher_is_better=False,
            ),
        ]
    return measurements


def against_follower(rounds: Rounds, setting: str) -> list[Measurement]:
    """The daemon, embedded and as `outbox poll`, against eventsourcing's follower: from the
    commit to the handler, and from when the write was due to the handler (eventsourcing's
    writers wait for its table lock in turn before they commit, which only the second shows)."""
    measurements = []
    for since, attribute in (("commit", "latencies"), ("due time", "from_due")):
        for quantile in ("p50", "p99"):
            group = f"{quantile} from {since} at {setting} against {FOLLOWER}"
            for variant in (FOLLOWER, SYNC_DAEMON, ASYNC_DAEMON, OUTBOX_POLL):
                values = [x for r in rounds[variant] for x in getattr(r, attribute)]
                aim = "aim <= 1x" if quantile == "p99" and since == "commit" else ""
                measurements.append(
                    Measurement(
                        group,
                        variant,
                        percentiles(values)[latency_rounds.QUANTILES[quantile]],
                        "ms",
                        None if variant == FOLLOWER else FOLLOWER,
                        "" if variant == FOLLOWER else aim,
                        higher_is_better=False,
                    )
                )
    return measurements


# --- a backlog drained from the consumer's start ---------------------------------------------


def drain_rounds(url: str, count: int, rounds: int, timing: Timing) -> dict[str, list[float]]:
    """msg/s of `count` messages queued before the consumer's process starts, timed from its
    start to the last message handled: `outbox poll` on a new subscription from the start of
    the publication, eventsourcing's follower from the first event; interleaved rounds."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("TRUNCATE outbox.messages")
    poller_bench.fill(url, "backlog", count)
    eventsourcing_follower.empty_table(url)
    eventsourcing_follower.fill(url, "backlog", count)
    rates: dict[str, list[float]] = {FOLLOWER: [], OUTBOX_POLL: []}
    timeout = timing.drain_timeout + count / 1000
    for number in range(rounds):
        for variant, its_rates in rates.items():
            its_rates.append(drain_once(url, variant, f"backlog-{number}", count, timeout))
    return rates


def drain_once(url: str, variant: str, name: str, count: int, timeout: float) -> float:
    started: list[float] = []
    handled_at: HandledAt = {}
    if variant == OUTBOX_POLL:
        consumer = consumer_processes.outbox_poll(started.append, "backlog")
    else:
        consumer = consumer_processes.eventsourcing_follower(started.append)
    with consumer(url, name, handled_at):
        if not wait_until(lambda: len(handled_at) >= count, timeout):
            raise RuntimeError(f"{variant} drained {len(handled_at)} of {count} in {timeout:g} s")
    return count / (max(handled_at.values()) - started[0])


def drain_rows(rates: dict[str, list[float]], count: int) -> list[Measurement]:
    group = "drain of a queued backlog from the consumer's start"
    return [
        Measurement(
            group,
            variant,
            statistics.median(its_rates),
            "msg/s",
            None if variant == FOLLOWER else FOLLOWER,
            "; ".join(
                note
                for note in (
                    "aim >= 1x" if variant != FOLLOWER else "",
                    f"{count:,} msgs; rounds {', '.join(f'{r:,.0f}' for r in its_rates)}",
                )
                if note
            ),
        )
        for variant, its_rates in rates.items()
    ]
