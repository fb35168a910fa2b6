"""Running `outbox poll` daemons as real processes, and watching what they did.

A test starts daemons through a `DaemonGroup` (a context manager that SIGKILLs whatever is
still running when the test ends, pass or fail), then faults them: SIGKILL, SIGSTOP/SIGCONT,
pg_terminate_backend. What was delivered is read back from the `handled` table that
tests.support.recording_handler fills; what the subscription looks like, through
tests.support.stored and tests.support.samplers.
Conditions are polled with deadlines (`wait_until`), never slept on.
"""

import bisect
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

import psycopg

from outbox.positions import MAX_PART, Position
from tests.support.cli import outbox_environment
from tests.support.databases import PROJECT_ROOT, close_probe, probe
from tests.support.stored import HOLDER_PREFIX, current_leader

HANDLER = "tests.support.recording_handler:record"
SLOW_HANDLER = "tests.support.recording_handler:record_slowly"

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


# Daemon sessions ----------------------------------------------------------------------------

# The daemon sessions (leaders, standbys, LISTEN) in this database: the server may be shared,
# and other databases' daemons are none of this test's business.
DAEMON_BACKENDS = (
    "SELECT pid FROM pg_stat_activity"
    " WHERE application_name LIKE %s AND datname = current_database()"
)


def daemon_backend_pids(url: str) -> list[int]:
    """The server pids of the daemon sessions in this database."""
    rows = probe(url).execute(DAEMON_BACKENDS, (HOLDER_PREFIX + "%",)).fetchall()
    return [row[0] for row in rows]


def terminate_daemon_backends(url: str) -> list[int]:
    """pg_terminate_backend every daemon session in this database; the pids terminated."""
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            DAEMON_BACKENDS + " AND pg_terminate_backend(pid)", (HOLDER_PREFIX + "%",)
        ).fetchall()
    return [row[0] for row in rows]


# Daemon processes ---------------------------------------------------------------------------


def daemon_environment(url: str) -> dict[str, str]:
    """INFO logs (what the tests read), and the project on the path for the test handlers."""
    pythonpath = os.pathsep.join([str(PROJECT_ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    return outbox_environment(url, OUTBOX_LOG_LEVEL="INFO", PYTHONPATH=pythonpath)


# A text log record's first line (outbox_cli/log_format.py TextLogFormatter).
_RECORD_HEADER = re.compile(
    r"\d{4}-\d\d-\d\d [\d:,]+ (?P<level>[A-Z]+) (?P<logger>[\w.]+)(?: \[shard \d+/\d+\])?: "
)


def _term_started(subscription: str) -> str:
    """A term's first line: `leading NAME from TX:POS (epoch E)`, or `from end of transaction
    TX` for a checkpoint at the safe frontier (outbox.positions.readable)."""
    return (
        rf"leading {re.escape(subscription)} from (?:(\d+):(\d+)|end of transaction (\d+)) \(epoch"
    )


def _position(tx: str, pos: str, end_of: str) -> Position:
    return Position(int(end_of), MAX_PART) if end_of else Position(int(tx), int(pos))


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
        (kills, lost sessions, lost leadership) must not produce any. A handler's failure is
        not one: its first is logged at WARNING with the handler's traceback."""
        found = []
        handler_failure = False
        for line in self.log().splitlines():
            if header := _RECORD_HEADER.match(line):
                handler_failure = header["logger"] == "poller.daemon.reporting.failure_log"
            if re.search(r" (ERROR|CRITICAL) |Task was destroyed", line) or (
                line.startswith("Traceback") and not handler_failure
            ):
                found.append(line)
        return found

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
        match = self.wait_for_log(_term_started(subscription), timeout)
        return _position(match[1], match[2], match[3])

    def terms(self, subscription: str) -> list[Position]:
        """Every checkpoint a leadership term of this daemon started from, in order."""
        found = re.findall(_term_started(subscription), self.log())
        return [_position(*groups) for groups in found]

    def consumer_changes(self, subscription: str, consumers: int) -> int:
        """How many times this daemon applied a consumer count of `consumers` (its log says)."""
        pattern = rf"subscription {re.escape(subscription)}: {consumers} consumers\b"
        return len(re.findall(pattern, self.log()))

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
        self,
        subscription: str,
        *options: str,
        handler: str = HANDLER,
        name: str | None = None,
        relay_to: str | None = None,
    ) -> Daemon:
        """`outbox poll` with `handler`, or `outbox relay --to relay_to`."""
        name = name or f"daemon-{len(self.started) + 1}"
        runs = ["poll", "--handler", handler] if relay_to is None else ["relay", "--to", relay_to]
        log_path = self.log_dir / f"{name}.log"
        with log_path.open("wb") as log_file:
            process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "outbox_cli",
                    *runs,
                    "--subscription",
                    subscription,
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


def leader_among(url: str, subscription: str, pool: Sequence[Daemon]) -> Daemon | None:
    """The daemon of `pool` that holds the lease and has started its term, if any."""
    lease = current_leader(url, subscription)
    for daemon in pool:
        if lease is not None and daemon.pid == lease.pid and daemon.alive():
            return daemon if daemon.terms(subscription) else None
    return None
