"""Running `outbox poll` daemons as real processes, and watching what they did.

A test starts daemons through a `DaemonGroup` (a context manager that SIGKILLs whatever is
still running when the test ends, pass or fail), then faults them: SIGKILL, SIGSTOP/SIGCONT,
pg_terminate_backend. What was delivered is read back from the `handled` table that
tests.support.recording_handler fills; where the checkpoint went, from outbox.subscriptions.
Conditions are polled with deadlines (`wait_until`), never slept on.
"""

import bisect
import dataclasses
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

import psycopg

import outbox
from poller import administration
from poller.demo.workload import WorkloadShape, run_writers
from poller.positions import Position
from tests.support.databases import PROJECT_ROOT

HANDLER = "tests.support.recording_handler:record"
SLOW_HANDLER = "tests.support.recording_handler:record_slowly"
HOLDER_PREFIX = "outbox-poller:"

T = TypeVar("T")


def wait_until(
    condition: Callable[[], T | None], timeout: float, what: str, interval: float = 0.02
) -> T:
    """Poll `condition` until it returns something truthy, and return that; fail after
    `timeout` seconds naming `what`."""
    deadline = time.monotonic() + timeout
    while True:
        result = condition()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


# One autocommit connection per database and thread for the many small polling queries: a
# new connection per poll would fork a backend every 20 ms and load the machine under test.
_probes = threading.local()


def probe(url: str) -> psycopg.Connection[Any]:
    connections: dict[str, psycopg.Connection[Any]] = _probes.__dict__.setdefault("by_url", {})
    conn = connections.get(url)
    if conn is None or conn.closed:
        conn = psycopg.connect(url, autocommit=True, application_name="outbox-test-probe")
        connections[url] = conn
    return conn


def close_probe(url: str) -> None:
    connections: dict[str, psycopg.Connection[Any]] = _probes.__dict__.get("by_url", {})
    conn = connections.pop(url, None)
    if conn is not None:
        conn.close()


# The handled table --------------------------------------------------------------------------


class Handled(NamedTuple):
    """One delivery as the recording handler saw it; `id` is the order of recording."""

    id: int
    position: int
    transaction_id: int
    pid: int
    handled_at: Any

    @property
    def at(self) -> Position:
        return Position(self.transaction_id, self.position)


def create_handled_table(url: str) -> None:
    # No primary key, no unique position: a message delivered twice is two rows.
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE handled ("
            " id bigint GENERATED ALWAYS AS IDENTITY,"
            " position bigint NOT NULL,"
            " transaction_id bigint NOT NULL,"
            " pid integer NOT NULL,"
            " handled_at timestamptz NOT NULL)"
        )


def handled_rows(url: str) -> list[Handled]:
    """Every delivery so far, in the order the handler recorded them."""
    conn = probe(url)
    rows = conn.execute(
        "SELECT id, position, transaction_id, pid, handled_at FROM handled ORDER BY id"
    ).fetchall()
    return [Handled(*row) for row in rows]


def handled_positions(url: str, pid: int | None = None) -> set[int]:
    conn = probe(url)
    if pid is None:
        rows = conn.execute("SELECT position FROM handled").fetchall()
    else:
        rows = conn.execute("SELECT position FROM handled WHERE pid = %s", (pid,)).fetchall()
    return {row[0] for row in rows}


def wait_for_all_handled(url: str, committed: set[int], timeout: float = 30) -> None:
    """Wait until every committed position was handled; on timeout, say which were not."""
    try:
        wait_until(lambda: handled_positions(url) >= committed, timeout, "every message")
    except AssertionError:
        missing = sorted(committed - handled_positions(url))
        raise AssertionError(
            f"{len(missing)} of {len(committed)} committed messages never handled"
            f" within {timeout} s, e.g. positions {missing[:10]}"
        ) from None


def count_handled_by(url: str, pid: int) -> int:
    conn = probe(url)
    row = conn.execute("SELECT count(*) FROM handled WHERE pid = %s", (pid,)).fetchone()
    assert row is not None
    return int(row[0])


def delivery_order(url: str, publication: str) -> list[Position]:
    """Every message of the publication (committed ones: rolled-back rows are gone), in the
    order a single consumer must see them."""
    conn = probe(url)
    rows = conn.execute(
        "SELECT transaction_id::text::bigint, position FROM outbox.messages"
        " WHERE publication_id = %s ORDER BY transaction_id, position",
        (publication,),
    ).fetchall()
    return [Position(tx, pos) for tx, pos in rows]


def assert_resumed_exactly_after(
    order: Sequence[Position], start: Position, delivered: Sequence[Position], who: str
) -> None:
    """`delivered` is the unbroken run of committed messages right after `start`: a term
    resumed from the stored checkpoint, skipped nothing and kept the order."""
    assert delivered, f"{who} delivered nothing"
    first = bisect.bisect_right(order, start)
    assert list(delivered) == list(order[first : first + len(delivered)]), (
        f"{who} did not deliver the committed messages after its checkpoint {start} in order"
    )


# The subscription as stored -----------------------------------------------------------------


class Leader(NamedTuple):
    token: int
    holder: str
    pid: int
    since: Any
    expires_at: Any


def create_subscription(url: str, name: str, publication: str, **settings: Any) -> None:
    """A subscription from the start of the publication (what `outbox subscription create
    NAME --publication P --from start --setting ...` does, without a process start)."""
    with psycopg.connect(url) as conn:
        administration.create(conn, name, publication, "start", settings)


def stored_checkpoint(url: str, subscription: str) -> Position:
    conn = probe(url)
    row = conn.execute(
        "SELECT last_processed_transaction_id::text::bigint, last_processed_position"
        " FROM outbox.subscriptions WHERE subscription_id = %s",
        (subscription,),
    ).fetchone()
    assert row is not None, f"no subscription {subscription!r}"
    return Position(row[0], row[1])


def current_leader(url: str, subscription: str) -> Leader | None:
    conn = probe(url)
    row = conn.execute(
        "SELECT token, holder, pid, since, expires_at FROM outbox.subscription_leaders"
        " WHERE subscription_id = %s",
        (subscription,),
    ).fetchone()
    return None if row is None else Leader(*row)


def daemon_backend_pids(url: str) -> list[int]:
    """The server pids of the daemon sessions (leaders, standbys, LISTEN) in this database
    (the server may be shared: other databases' daemons are none of this test's business)."""
    conn = probe(url)
    rows = conn.execute(
        "SELECT pid FROM pg_stat_activity"
        " WHERE application_name LIKE %s AND datname = current_database()",
        (HOLDER_PREFIX + "%",),
    ).fetchall()
    return [row[0] for row in rows]


def terminate_daemon_backends(url: str) -> list[int]:
    """pg_terminate_backend every daemon session in this database; the pids terminated."""
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pid FROM pg_stat_activity"
            " WHERE application_name LIKE %s AND datname = current_database()"
            " AND pg_terminate_backend(pid)",
            (HOLDER_PREFIX + "%",),
        ).fetchall()
    return [row[0] for row in rows]


# Daemon processes ---------------------------------------------------------------------------


def daemon_environment(url: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OUTBOX_")}
    env["OUTBOX_DATABASE_URL"] = url
    env["OUTBOX_LOG_LEVEL"] = "INFO"
    env["PYTHONPATH"] = os.pathsep.join(
        [str(PROJECT_ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
    )
    return env


@dataclass
class Daemon:
    """One `outbox poll` process; its stdout and stderr (the log) go to `log_path`."""

    process: "subprocess.Popen[bytes]"
    log_path: Path
    name: str

    @property
    def pid(self) -> int:
        return self.process.pid

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def alive(self) -> bool:
        return self.process.poll() is None

    def errors(self) -> list[str]:
        """Log lines at ERROR or above, and tracebacks: faults the daemon is built to survive
        (kills, lost sessions, lost leadership) must not produce any."""
        return [
            line
            for line in self.log().splitlines()
            if re.search(r" (ERROR|CRITICAL) |^Traceback|Task was destroyed", line)
        ]

    def wait_for_log(self, pattern: str, timeout: float) -> re.Match[str]:
        """The first match of `pattern` in the log; fails early if the daemon exits."""

        def found() -> re.Match[str] | None:
            match = re.search(pattern, self.log())
            if match is None and not self.alive():
                raise AssertionError(
                    f"{self.name} exited ({self.process.returncode}) before logging"
                    f" {pattern!r}:\n{self.log()}"
                )
            return match

        return wait_until(found, timeout, f"{self.name} to log {pattern!r}")

    def leading_from(self, subscription: str, timeout: float = 30) -> Position:
        """The checkpoint this daemon's leadership term started from (its log says)."""
        match = self.wait_for_log(
            rf"leading {re.escape(subscription)} from (\d+):(\d+) \(epoch", timeout
        )
        return Position(int(match[1]), int(match[2]))

    def terms(self, subscription: str) -> list[Position]:
        """Every checkpoint a leadership term of this daemon started from, in order."""
        pattern = rf"leading {re.escape(subscription)} from (\d+):(\d+) \(epoch"
        return [Position(int(tx), int(pos)) for tx, pos in re.findall(pattern, self.log())]

    def wait_for_terms(self, subscription: str, count: int, timeout: float = 30) -> None:
        wait_until(
            lambda: len(self.terms(subscription)) >= count,
            timeout,
            f"{self.name} to start leadership term {count}",
        )

    def kill(self) -> None:
        """SIGKILL, and reap."""
        if self.alive():
            self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=30)

    def pause(self) -> None:
        self.process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        self.process.send_signal(signal.SIGCONT)

    def terminate(self, timeout: float = 30) -> int:
        """SIGTERM (a graceful stop) and the exit code."""
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout=timeout)


@dataclass
class DaemonGroup:
    url: str
    log_dir: Path
    started: list[Daemon] = field(default_factory=list)

    def start(
        self, subscription: str, *options: str, handler: str = HANDLER, name: str | None = None
    ) -> Daemon:
        name = name or f"daemon-{len(self.started) + 1}"
        log_path = self.log_dir / f"{name}.log"
        with log_path.open("wb") as log_file:
            process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "poller.cli",
                    "poll",
                    "--subscription",
                    subscription,
                    "--handler",
                    handler,
                    *options,
                ],
                stdout=log_file,
                stderr=subprocess.STDOUT,
                env=daemon_environment(self.url),
                cwd=PROJECT_ROOT,
            )
        daemon = Daemon(process, log_path, name)
        self.started.append(daemon)
        return daemon

    def kill_all(self) -> None:
        for daemon in self.started:
            if daemon.alive():
                daemon.process.send_signal(signal.SIGKILL)
        for daemon in self.started:
            daemon.process.wait(timeout=30)

    def logs(self) -> str:
        return "\n".join(f"--- {d.name} (pid {d.pid})\n{d.log()}" for d in self.started)


@contextmanager
def daemon_group(url: str, log_dir: Path) -> Iterator[DaemonGroup]:
    """Daemons for one test; every one still running is SIGKILLed on the way out."""
    group = DaemonGroup(url, log_dir)
    try:
        yield group
    finally:
        group.kill_all()
        close_probe(url)


def wait_for_deliveries(url: str, daemon: Daemon, count: int, timeout: float = 30) -> int:
    """Wait until `daemon` delivered at least `count` messages in all; how many it did."""
    return wait_until(
        lambda: (n := count_handled_by(url, daemon.pid)) >= count and n,
        timeout,
        f"{daemon.name} to deliver {count} messages",
    )


# Writers ------------------------------------------------------------------------------------


@dataclass
class Written:
    """What writers committed and rolled back, by position; thread-safe."""

    committed: set[int] = field(default_factory=set)
    rolled_back: set[int] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, positions: Sequence[int], *, committed: bool) -> None:
        with self.lock:
            (self.committed if committed else self.rolled_back).update(positions)

    def committed_snapshot(self) -> set[int]:
        with self.lock:
            return set(self.committed)


def append_committed(url: str, publication: str, count: int) -> list[int]:
    """`count` messages, each committed in its own transaction, in order."""
    positions = []
    with psycopg.connect(url) as conn:
        for n in range(count):
            with conn.transaction():
                positions.append(outbox.append(conn, publication, "TestEvent", {"n": n}))
    return positions


class WorkloadLoop:
    """The demo's out-of-order writers (poller.demo.workload), round after round with a new
    seed, in a background thread until stopped. Use as a context manager."""

    def __init__(self, url: str, publication: str, shape: WorkloadShape) -> None:
        self.url = url
        self.publication = publication
        self.shape = shape
        self.written = Written()
        self.rounds = 0
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="workload-loop", daemon=True)

    def __enter__(self) -> "WorkloadLoop":
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()

    def stop(self) -> Written:
        """Stop after the current round; what every round committed and rolled back."""
        self._stop.set()
        self._thread.join(timeout=60)
        if self.error is not None:
            raise AssertionError(f"the writers failed: {self.error!r}") from self.error
        return self.written

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                self.rounds += 1
                shape = dataclasses.replace(self.shape, seed=self.shape.seed + self.rounds)
                tally = run_writers(self.url, self.publication, shape)
                self.written.add(sorted(tally.committed), committed=True)
                self.written.add(sorted(tally.rolled_back), committed=False)
        except BaseException as error:  # reported by stop()
            self.error = error


class ContinuousWriter:
    """A thread appending one message per transaction every `interval` seconds until stopped;
    every fifth transaction rolls back. Use as a context manager."""

    def __init__(self, url: str, publication: str, interval: float = 0.005) -> None:
        self.url = url
        self.publication = publication
        self.interval = interval
        self.written = Written()
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="continuous-writer", daemon=True)

    def __enter__(self) -> "ContinuousWriter":
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()

    def stop(self) -> set[int]:
        """Stop, and return every committed position."""
        self._stop.set()
        self._thread.join(timeout=30)
        if self.error is not None:
            raise AssertionError(f"the writer failed: {self.error!r}") from self.error
        return self.written.committed_snapshot()

    def _run(self) -> None:
        try:
            with psycopg.connect(self.url) as conn:
                n = 0
                while not self._stop.is_set():
                    n += 1
                    rolled_back = n % 5 == 0
                    position = 0
                    with conn.transaction() as transaction:
                        position = outbox.append(conn, self.publication, "TestEvent", {"n": n})
                        if rolled_back:
                            raise psycopg.Rollback(transaction)
                    self.written.add([position], committed=not rolled_back)
                    self._stop.wait(self.interval)
        except BaseException as error:  # reported by stop()
            self.error = error


# The checkpoint over time -------------------------------------------------------------------


class CheckpointSample(NamedTuple):
    observed_at: Any  # the server's clock_timestamp(), comparable with handled_at
    checkpoint: Position
    updated_at: Any
    token: int | None
    holder: str | None
    runtime_at: Any


class CheckpointLog:
    """Samples the stored checkpoint and the lease row every `interval` s in a thread."""

    def __init__(self, url: str, subscription: str, interval: float = 0.02) -> None:
        self.url = url
        self.subscription = subscription
        self.interval = interval
        self.samples: list[CheckpointSample] = []
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="checkpoint-log", daemon=True)

    def __enter__(self) -> "CheckpointLog":
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()

    def stop(self) -> list[CheckpointSample]:
        self._stop.set()
        self._thread.join(timeout=30)
        if self.error is not None:
            raise AssertionError(f"the checkpoint log failed: {self.error!r}") from self.error
        return self.samples

    def _run(self) -> None:
        try:
            with psycopg.connect(self.url, autocommit=True) as conn:
                while not self._stop.is_set():
                    # One statement, so the checkpoint and the lease row are one snapshot.
                    row = conn.execute(
                        "SELECT clock_timestamp(), s.last_processed_transaction_id::text::bigint,"
                        " s.last_processed_position, s.updated_at, l.token, l.holder,"
                        " l.runtime_at"
                        " FROM outbox.subscriptions AS s"
                        " LEFT JOIN outbox.subscription_leaders AS l USING (subscription_id)"
                        " WHERE s.subscription_id = %s",
                        (self.subscription,),
                    ).fetchone()
                    assert row is not None
                    observed_at, tx, pos, updated_at, token, holder, runtime_at = row
                    self.samples.append(
                        CheckpointSample(
                            observed_at,
                            Position(tx, pos),
                            updated_at,
                            token,
                            holder,
                            runtime_at,
                        )
                    )
                    self._stop.wait(self.interval)
        except BaseException as error:  # reported by stop()
            self.error = error
