"""The daemon against the raw query: drain rate of a backlog, and commit-to-handler latency."""

import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

import psycopg

import outbox
import poller
from bench.common import Measurement, cpython_default_collector, percentiles
from outbox.positions import START, Position
from outbox.queries import QUERIES
from poller import operations
from poller.daemon.background import DaemonThread
from poller.message import Message
from poller.store.message_reads import prepare_reader, read_batch

TITLE = "Poller: drain rate and commit-to-handler latency (daemon vs the raw query)"
BATCH = 500


def run(database_url: str, quick: bool) -> list[Measurement]:
    backlog = 20_000 if quick else 1_000_000
    seconds = 1.0 if quick else 8.0
    return drain(database_url, backlog) + latency(database_url, seconds)


def fill(database_url: str, publication: str, count: int, keys: int = 0) -> None:
    """A backlog in one statement; with `keys`, messages cycle through that many partition keys."""
    with psycopg.connect(database_url) as conn:
        conn.execute(
            "INSERT INTO outbox.messages"
            " (publication_id, message_id, message_type, partition_key, data)"
            " SELECT %s, n::text, 'Drained', CASE WHEN %s > 0 THEN 'key-' || n %% %s END,"
            " jsonb_build_object('n', n, 'pad', repeat('x', 100))"
            " FROM generate_series(1, %s) AS n",
            (publication, keys, max(keys, 1), count),
        )
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE outbox.messages")


def raw_read_rate(database_url: str, publication: str, count: int) -> float:
    """Page through with the named query alone: the ceiling for any poller."""
    started = time.perf_counter()
    seen = 0
    after = START
    with psycopg.connect(database_url, autocommit=True) as conn:
        prepare_reader(conn)  # the read connection as the daemon sets it up
        while seen < count:
            rows = conn.execute(
                QUERIES["read_batch"],
                {
                    "publication": publication,
                    **after.query_parameters("after_"),
                    "limit": BATCH,
                },
                binary=True,  # as read_batch reads
            ).fetchall()
            seen += len(rows)
            after = Position(rows[-1][1], rows[-1][0])
    return count / (time.perf_counter() - started)


class Countdown:
    """Counts handled messages; `done` is set when `target` were. The handlers below are
    no-ops around it: the bench measures what the daemon costs per message."""

    def __init__(self, target: int) -> None:
        self.remaining = target
        self.done = threading.Event()
        self._lock = threading.Lock()  # plain handlers may run on several threads

    def count(self, handled: int) -> None:
        with self._lock:
            self.remaining -= handled
            if self.remaining <= 0:
                self.done.set()


def sync_handler(countdown: Countdown) -> Callable[[Message], None]:
    def handle(_message: Message) -> None:
        countdown.count(1)

    return handle


def async_handler(countdown: Countdown) -> Callable[[Message], Awaitable[None]]:
    async def handle(_message: Message) -> None:
        countdown.count(1)

    return handle


def batch_handler(countdown: Countdown) -> Callable[[list[Message]], None]:
    @poller.batch_handler()
    def handle(messages: list[Message]) -> None:
        countdown.count(len(messages))

    return handle


# Short names: rich wraps a long variant over two lines.
HANDLER_KINDS: dict[str, Callable[[Countdown], Callable[[Any], Any]]] = {
    "def handler": sync_handler,
    "async def handler": async_handler,
    "batch handler": batch_handler,  # a plain def, max_batch_size 500 (the default)
}


def daemon_drain_rate(
    database_url: str,
    publication: str,
    count: int,
    kind: str,
    settings: dict[str, Any] | None = None,
) -> float:
    name = f"drain-{time.monotonic_ns()}"
    with psycopg.connect(database_url) as conn:
        operations.create(conn, name, publication, "start", settings or {})
    countdown = Countdown(count)
    started = time.perf_counter()
    with DaemonThread(database_url, [name], HANDLER_KINDS[kind](countdown)):
        if not countdown.done.wait(timeout=600):
            raise RuntimeError(f"the daemon drained only {count - countdown.remaining} of {count}")
        elapsed = time.perf_counter() - started
    return count / elapsed


def drain(database_url: str, count: int) -> list[Measurement]:
    fill(database_url, "drain", count)
    group = f"drain {count:,} messages"
    raw = raw_read_rate(database_url, "drain", count)
    measurements = [
        Measurement(group, "raw read_batch query", raw, "msg/s", note="pages of 500, no decoding")
    ]
    aims = {"def handler": ">= 0.25x", "async def handler": ">= 0.35x", "batch handler": ">= 0.5x"}
    for kind in HANDLER_KINDS:
        rate = daemon_drain_rate(database_url, "drain", count, kind)
        measurements.append(
            Measurement(
                group,
                f"daemon, {kind} no-op",
                rate,
                "msg/s",
                "raw read_batch query",
                note=f"defaults; aim {aims[kind]}",
            )
        )
    with cpython_default_collector():
        embedded = daemon_drain_rate(database_url, "drain", count, "def handler")
    measurements.append(
        Measurement(
            group,
            "def handler, CPython's gc",
            embedded,
            "msg/s",
            "raw read_batch query",
            note="embedded without set_for_daemon",
        )
    )
    wide = daemon_drain_rate(
        database_url,
        "drain",
        count,
        "async def handler",
        {"max_in_flight": 100, "read_batch_size": 1000, "buffer_size": 5000},
    )
    measurements.append(
        Measurement(
            group, "daemon, async def, 100 in flight", wide, "msg/s", "raw read_batch query"
        )
    )
    return measurements


class LatencyRecorder:
    def __init__(self) -> None:
        self.handled_at: dict[str, float] = {}

    async def __call__(self, message: Message) -> None:
        self.handled_at[message.message_id] = time.perf_counter()


def write_steadily(
    database_url: str, publication: str, seconds: float, notify: bool
) -> dict[str, float]:
    """~500 messages/s, one per transaction; returns commit time by message id."""
    committed: dict[str, float] = {}
    interval = 1 / 500
    deadline = time.perf_counter() + seconds
    next_at = time.perf_counter()
    with psycopg.connect(database_url) as conn:
        n = 0
        while time.perf_counter() < deadline:
            message_id = f"{publication}-{n}"
            outbox.append(
                conn, publication, "Timed", {"n": n}, message_id=message_id, notify=notify
            )
            conn.commit()
            committed[message_id] = time.perf_counter()
            n += 1
            next_at += interval
            time.sleep(max(0.0, next_at - time.perf_counter()))
    return committed


def daemon_latency(database_url: str, seconds: float, notify: bool) -> tuple[float, float, float]:
    publication = f"latency-{'notify' if notify else 'poll'}"
    with psycopg.connect(database_url) as conn:
        operations.create(conn, publication, publication, "end", {})
    recorder = LatencyRecorder()
    with DaemonThread(database_url, [publication], recorder):
        time.sleep(0.5)
        committed = write_steadily(database_url, publication, seconds, notify)
        time.sleep(0.5)
    return percentiles(
        [recorder.handled_at[k] - t for k, t in committed.items() if k in recorder.handled_at]
    )


def raw_poll_latency(database_url: str, seconds: float) -> tuple[float, float, float]:
    """A bare loop running the query every 1 ms: the floor for polling."""
    publication = "latency-raw"
    seen: dict[str, float] = {}
    stop = threading.Event()

    def poll() -> None:
        after = START
        with psycopg.connect(database_url, autocommit=True) as conn:
            prepare_reader(conn)
            while not stop.is_set():
                for message in read_batch(conn, publication, after, BATCH):
                    seen[message.message_id] = time.perf_counter()
                    after = message.at
                time.sleep(0.001)

    poller = threading.Thread(target=poll)
    poller.start()
    committed = write_steadily(database_url, publication, seconds, notify=False)
    time.sleep(0.3)
    stop.set()
    poller.join()
    return percentiles([seen[k] - t for k, t in committed.items() if k in seen])


def latency(database_url: str, seconds: float) -> list[Measurement]:
    variants = {
        "raw query every 1 ms": raw_poll_latency(database_url, seconds),
        "daemon, adaptive polling (default)": daemon_latency(database_url, seconds, notify=False),
        "daemon, writers notify=True": daemon_latency(database_url, seconds, notify=True),
    }
    measurements = []
    for quantile, index, aim in (
        ("p50", 0, "aim < 3 ms"),
        ("p95", 1, ""),
        ("p99", 2, "aim < 15 ms"),
    ):
        group = f"latency {quantile} at ~500 msg/s"
        for variant, values in variants.items():
            baseline = None if variant.startswith("raw") else "raw query every 1 ms"
            note = aim if variant.startswith("daemon, adaptive") else ""
            measurements.append(
                Measurement(
                    group, variant, values[index], "ms", baseline, note, higher_is_better=False
                )
            )
    return measurements
