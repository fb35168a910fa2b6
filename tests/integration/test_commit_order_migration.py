"""Migration 0017 on a populated outbox: nothing stored changes meaning, and with daemons and
row-locked writers running across the upgrade, every message is delivered exactly once and each
key in commit order from the upgrade on.

The outbox is built at the head of the chain with 0017 undone (its downgrade: the writers' own
xid as the default again), so the rest of today's code, which later migrations serve, runs on
it; then 0017's upgrade statements are applied as alembic applies them."""

import importlib.util
from types import ModuleType
from typing import Any

import psycopg
import pytest
from psycopg import sql

from outbox.schema_migrations import migrations_directory
from poller import operations
from tests.integration.test_daemon import EAGER_CHECKPOINTS, Recorder, wait_for
from tests.support.inprocess import running_daemon
from tests.support.locked_writers import append_through_a_row_lock


def migration_0017() -> ModuleType:
    path = migrations_directory() / "versions" / "0017_commit_ordered_messages.py"
    spec = importlib.util.spec_from_file_location("migration_0017", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


MIGRATION = migration_0017()


def run(url: str, statements: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(statements)


@pytest.fixture
def outbox_before_0017(database_url: str) -> str:
    run(database_url, MIGRATION.WRITERS_OWN_TRANSACTION_ID)
    return database_url


def upgrade(url: str) -> None:
    run(url, MIGRATION.ORDERING_TRANSACTION_ID)


def every_stored_row(url: str) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table of the outbox schema but alembic's, as text."""
    with psycopg.connect(url) as conn:
        tables = [
            row[0]
            for row in conn.execute(
                "SELECT c.relname FROM pg_class AS c JOIN pg_namespace AS n"
                " ON n.oid = c.relnamespace WHERE n.nspname = 'outbox'"
                " AND c.relkind IN ('r', 'p') AND NOT c.relispartition"
                " AND c.relname <> 'alembic_version' ORDER BY 1"
            ).fetchall()
        ]
        return {
            table: conn.execute(
                sql.SQL("SELECT t::text FROM outbox.{} AS t ORDER BY 1").format(
                    sql.Identifier(table)
                )
            ).fetchall()
            for table in tables
        }


def test_the_upgrade_rewrites_no_stored_row(outbox_before_0017: str) -> None:
    url = outbox_before_0017
    with psycopg.connect(url) as conn:
        operations.create(conn, "plain", "orders", "start", {})
        operations.create(conn, "sharded", "orders", "start", {}, shards=3)
        operations.create(conn, "spark-orders", "orders", "start", {"kind": "spark"})
    pairs = [append_through_a_row_lock(url, tag=str(n)) for n in range(3)]
    with psycopg.connect(url) as conn:
        operations.seek(conn, "plain", f"{pairs[1].second.transaction_id}:0")
    before = every_stored_row(url)
    upgrade(url)
    assert every_stored_row(url) == before
    # Written before the upgrade, under the writers' own xids: the old order, kept.
    assert all(pair.second < pair.first for pair in pairs)
    assert (
        append_through_a_row_lock(url, tag="after").first
        < append_through_a_row_lock(url, tag="after-2").first
    )


def test_daemons_running_across_the_upgrade_deliver_each_message_once(
    outbox_before_0017: str,
) -> None:
    url = outbox_before_0017
    with psycopg.connect(url) as conn:
        operations.create(conn, "plain", "orders", "start", EAGER_CHECKPOINTS)
        operations.create(
            conn, "sharded", "orders", "start", EAGER_CHECKPOINTS | {"strategy": "pinned"}, shards=2
        )
    plain, sharded = Recorder(), Recorder()
    pairs_after: list[Any] = []
    with running_daemon(url, ["plain"], plain), running_daemon(url, ["sharded"], sharded):
        for n in range(20):
            append_through_a_row_lock(url, key=f"account-{n % 3}", tag=f"before-{n}")
        wait_for(lambda: len(plain.messages) >= 10)
        upgrade(url)
        for n in range(20):
            pairs_after.append(
                append_through_a_row_lock(url, key=f"account-{n % 3}", tag=f"after-{n}")
            )
        wait_for(lambda: len(plain.messages) >= 80 and len(sharded.messages) >= 80)
    for recorder in (plain, sharded):
        ids = [message.message_id for message in recorder.messages]
        assert len(ids) == 80
        assert len(set(ids)) == 80, "a message was delivered twice"
        order = {message_id: index for index, message_id in enumerate(ids)}
        assert all(order[pair.first_id] < order[pair.second_id] for pair in pairs_after)
