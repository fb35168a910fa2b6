"""The poller daemon as a process, without faults: order under out-of-order commits, and a
long transaction that holds delivery back (stall warning, `outbox status`)."""

import re
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from outbox.positions import START
from outbox_cli.demo.workload import WorkloadShape, run_writers
from tests.support.cli import outbox_command
from tests.support.daemons import (
    DaemonGroup,
    create_handled_table,
    daemon_group,
    handled_positions,
    handled_rows,
    wait_for_all_handled,
    wait_until,
)
from tests.support.databases import DatabaseFactory
from tests.support.stored import (
    create_subscription,
    stored_checkpoint,
)
from tests.support.writers import (
    append_committed,
)


@pytest.fixture
def daemons(database_url: str, tmp_path: Path) -> Iterator[DaemonGroup]:
    create_handled_table(database_url)
    with daemon_group(database_url, tmp_path) as group:
        yield group


def test_out_of_order_writers_are_each_delivered_once_in_commit_safe_order(
    database_url: str, daemons: DaemonGroup
) -> None:
    created = outbox_command(
        ["subscription", "create", "orders", "--publication", "demo", "--from", "start"],
        database_url,
    )
    assert created.returncode == 0, created.stderr
    daemon = daemons.start("orders")
    assert daemon.leading_from("orders") == START

    # 16 writers, 400 transactions committing in random order, 15 % rolled back.
    tally = run_writers(database_url, "demo", WorkloadShape())
    assert tally.committed
    assert tally.rolled_back

    wait_for_all_handled(database_url, tally.committed)
    assert daemon.terminate() == 0, daemons.logs()
    assert not daemon.errors(), daemons.logs()

    rows = handled_rows(database_url)
    positions = [row.position for row in rows]
    assert len(positions) == len(set(positions)), "a message was delivered twice without a fault"
    assert set(positions) == tally.committed
    assert not set(positions) & tally.rolled_back
    # One consumer, one message in flight: strictly (transaction_id, position) order...
    delivered = [row.at for row in rows]
    assert delivered == sorted(delivered)
    # ...which is not position order: transactions interleaved their inserts.
    assert positions != sorted(positions)
    assert {row.pid for row in rows} == {daemon.pid}
    # The graceful stop wrote the final checkpoint: the last message, nothing in flight.
    assert stored_checkpoint(database_url, "orders") == delivered[-1]


@pytest.fixture
def other_database(database_factory: DatabaseFactory) -> Iterator[str]:
    """Another database of the same cluster: its transactions hold delivery back too."""
    url = database_factory.create(migrated=False)
    yield url
    database_factory.drop(url)


@pytest.fixture
def role_name(database_url: str) -> Iterator[str]:
    """A role the blocking session sets a password for."""
    name = f"blocker_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE ROLE {}").format(sql.Identifier(name)))
    yield name
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(name)))


def test_a_long_transaction_holds_delivery_back_and_is_named_without_its_sql(
    database_url: str, daemons: DaemonGroup, other_database: str, role_name: str
) -> None:
    create_subscription(database_url, "sub", "pub")
    daemon = daemons.start("sub", "--stall-threshold", "1")
    daemon.leading_from("sub")
    earlier = set(append_committed(database_url, "pub", 5))
    wait_until(lambda: handled_positions(database_url) >= earlier, 30, "the first messages")

    # A session in another database sets a password (taking an xid), then idles in its
    # transaction: its SQL holds the password literal.
    secret = f"pw-{uuid.uuid4().hex}"
    with psycopg.connect(other_database, application_name="long-transaction") as blocker:
        blocker.execute(
            sql.SQL("ALTER ROLE {} PASSWORD {}").format(
                sql.Identifier(role_name), sql.Literal(secret)
            )
        )
        blocker_pid = blocker.info.backend_pid
        other_name = blocker.info.dbname
        later = set(append_committed(database_url, "pub", 20))

        def stall_warning() -> re.Match[str] | None:
            assert not handled_positions(database_url) & later, "delivered past a running xid"
            return re.search(
                r"WARNING poller\.daemon\.term\.hidden_rows: subscription sub: committed messages"
                r" have waited .*held back by: (.*)",
                daemon.log(),
            )

        warning = wait_until(stall_warning, 30, "the stall warning")
        assert re.search(
            rf"session pid {blocker_pid} \(database {other_name}, user postgres, application"
            r" 'long-transaction', client \S+, state idle in transaction, in transaction for"
            r" [\d.]+ s\)",
            warning[1],
        ), warning[0]
        # Who, never what: no SQL of another session in the daemon's log, no password.
        assert "ALTER ROLE" not in daemon.log()
        assert secret not in daemon.log()
        assert not handled_positions(database_url) & later

        status = outbox_command(["status"], database_url)
        assert status.returncode == 0, status.stderr
        assert "blocked by" in status.stdout
        assert re.search(rf"session {blocker_pid}\b", status.stdout), status.stdout
        as_json = outbox_command(["status", "--json"], database_url)
        for shown in (status, as_json):
            assert "ALTER ROLE" not in shown.stdout
            assert secret not in shown.stdout
        # An operator who asks sees the statement, its password literal redacted.
        asked = outbox_command(["status", "--show-query"], database_url)
        assert asked.returncode == 0, asked.stderr
        assert f"sub: session {blocker_pid}, last statement: ALTER ROLE" in asked.stdout
        assert "PASSWORD ***" in asked.stdout
        assert secret not in asked.stdout
        with psycopg.connect(database_url) as conn:
            row = conn.execute(
                "SELECT blocked_by_pids FROM outbox.subscription_status"
                " WHERE subscription_id = 'sub'"
            ).fetchone()
        assert row is not None
        assert blocker_pid in row[0]
        assert not handled_positions(database_url) & later, "delivered past an open transaction"

        blocker.commit()
        committed_at = time.monotonic()
        wait_until(lambda: handled_positions(database_url) >= later, 30, "delivery to resume")
        resumed_after = time.monotonic() - committed_at
    assert resumed_after < 3, f"delivery resumed {resumed_after:.2f} s after the commit"
    rows = handled_rows(database_url)
    assert sorted(row.position for row in rows) == sorted(earlier | later)
