"""The database server's CPU time, read from /proc where the server runs on this machine.

Counted: the postmaster, every process of the bench's database (its client backends,
autovacuum and parallel workers in it) and the server's shared processes that belong to no
database (WAL writer, checkpointer, background writer, launchers). Left out: backends of
other databases, which on a shared server are other people's work, and the bench's own
connections (application_name BENCH_CONNECTION), this counter's among them. A process that
exits between two readings takes its CPU time with it, so a reading spans work whose
connections stay open (a drain's daemons).

The server is taken as local when the pid of this connection's backend names, in /proc, a
process whose command line (the backend's process title) names the bench's database; the
postmaster is that backend's parent.
"""

import os
from pathlib import Path

import psycopg
from psycopg.rows import TupleRow

from bench.held_connections import BENCH_CONNECTION

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
PROC = Path("/proc")

# Fields of /proc/<pid>/stat after the command name's closing parenthesis, counted from 0:
# state is field 3 of the man page, so field n is at n - 3.
PARENT_FIELD = 4 - 3
USER_TIME_FIELD = 14 - 3
SYSTEM_TIME_FIELD = 15 - 3

Ticks = dict[int, int]  # CPU clock ticks (user + system) by pid


def _stat_fields(pid: int) -> list[str]:
    text = (PROC / str(pid) / "stat").read_text()
    return text[text.rindex(")") + 2 :].split()


def _ticks(pid: int) -> int | None:
    try:
        fields = _stat_fields(pid)
    except (FileNotFoundError, ProcessLookupError):  # exited since it was listed
        return None
    return int(fields[USER_TIME_FIELD]) + int(fields[SYSTEM_TIME_FIELD])


def _locate_postmaster(conn: psycopg.Connection[TupleRow]) -> int:
    """The postmaster's pid on this machine, or ServerNotLocalError saying why not."""
    row = conn.execute("SELECT pg_backend_pid(), current_database()").fetchone()
    assert row is not None
    backend, database = row
    try:
        title = (PROC / str(backend) / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        fields = _stat_fields(backend)
    except FileNotFoundError as missing:
        raise ServerNotLocalError(
            f"no process {backend} here: the server runs elsewhere"
        ) from missing
    except PermissionError as refused:
        raise ServerNotLocalError(f"/proc/{backend} not readable here") from refused
    if database not in title.split():
        raise ServerNotLocalError(f"process {backend} here is not the server's backend")
    return int(fields[PARENT_FIELD])


class ServerNotLocalError(Exception):
    """The server's processes cannot be read from here; the message says why."""


class ServerCpu:
    """CPU seconds the server spent, between two `ticks()` readings, on the bench's database
    and its shared work (see the module's docstring). Raises ServerNotLocalError on opening when
    the server's processes are not readable from here."""

    def __init__(self, url: str) -> None:
        self._conn = psycopg.connect(url, autocommit=True, application_name=BENCH_CONNECTION)
        try:
            self._postmaster = _locate_postmaster(self._conn)
        except BaseException:
            self._conn.close()
            raise

    def ticks(self) -> Ticks:
        rows = self._conn.execute(
            "SELECT pid FROM pg_stat_activity"
            " WHERE (datname = current_database() OR datname IS NULL)"
            " AND application_name <> %s",
            (BENCH_CONNECTION,),
        ).fetchall()
        readings = {pid: _ticks(pid) for pid in [self._postmaster, *(row[0] for row in rows)]}
        return {pid: ticks for pid, ticks in readings.items() if ticks is not None}

    @staticmethod
    def seconds_between(before: Ticks, after: Ticks) -> float:
        """A process not in `before` started since, and counts from zero."""
        spent = sum(ticks - before.get(pid, 0) for pid, ticks in after.items())
        return spent / CLOCK_TICKS

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> "ServerCpu":
        return self

    def __exit__(self, *_: object) -> None:
        self.close()
