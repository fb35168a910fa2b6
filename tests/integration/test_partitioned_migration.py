"""Migration 0006 on an outbox with data in it, both ways: nothing lost, moved or renumbered."""

from typing import Any

import psycopg

from outbox import schema_migrations as migrations
from tests.support.databases import DatabaseFactory

ROWS = (
    "SELECT position, transaction_id::text, publication_id, message_id, message_type,"
    " partition_key, data, headers, appended_at FROM outbox.messages ORDER BY position"
)
SUBSCRIPTIONS = "SELECT * FROM outbox.subscriptions ORDER BY subscription_id"
PARKED = "SELECT * FROM outbox.parked_messages ORDER BY subscription_id, position"


def _snapshot(url: str) -> dict[str, list[tuple[Any, ...]]]:
    with psycopg.connect(url) as conn:
        return {
            "rows": conn.execute(ROWS).fetchall(),
            "subscriptions": conn.execute(SUBSCRIPTIONS).fetchall(),
            "parked": conn.execute(PARKED).fetchall(),
        }


def _fill_at_0004(url: str) -> None:
    with psycopg.connect(url) as conn:
        for batch in range(3):  # three transactions, so transaction ids differ
            conn.execute(
                "INSERT INTO outbox.messages"
                " (publication_id, message_id, message_type, partition_key, data, headers)"
                " SELECT CASE WHEN n %% 3 = 0 THEN 'invoices' ELSE 'orders' END, %s || '-' || n,"
                " 'T', 'key-' || (n %% 5), jsonb_build_object('n', n), '{\"h\": 1}'"
                " FROM generate_series(1, 400) AS n",
                (f"batch{batch}",),
            )
            conn.commit()
        # Rolled back: positions 1201-1210 are consumed, never visible.
        conn.execute(
            "INSERT INTO outbox.messages (publication_id, message_id, message_type, data)"
            " SELECT 'orders', 'gone-' || n, 'T', '{}' FROM generate_series(1, 10) AS n"
        )
        conn.rollback()
        conn.execute(
            "INSERT INTO outbox.subscriptions"
            " (subscription_id, publication_id, last_processed_transaction_id,"
            "  last_processed_position, settings)"
            " SELECT 'billing', 'orders', transaction_id, position, '{\"consumers\": 2}'"
            " FROM outbox.messages WHERE position = 500"
        )
        conn.execute(
            "INSERT INTO outbox.subscriptions (subscription_id, publication_id, settings)"
            " VALUES ('counts', 'invoices', '{\"kind\": \"spark\"}')"
        )
        conn.execute(
            "INSERT INTO outbox.parked_messages"
            " (subscription_id, position, transaction_id, attempts, last_error)"
            " SELECT 'billing', position, transaction_id, 10, 'boom'"
            " FROM outbox.messages WHERE position IN (7, 301)"
        )
        conn.commit()


def _append(url: str, message_id: str) -> int:
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "INSERT INTO outbox.messages (publication_id, message_id, message_type, data)"
            " VALUES ('orders', %s, 'T', '{}') RETURNING position",
            (message_id,),
        ).fetchone()
    assert row is not None
    return int(row[0])


def test_upgrade_and_downgrade_keep_every_row_subscription_and_parked_message(
    database_factory: DatabaseFactory,
) -> None:
    url = database_factory.create(migrated=False)
    try:
        migrations.upgrade(url, "0004")
        _fill_at_0004(url)
        before = _snapshot(url)
        assert len(before["rows"]) == 1200

        migrations.upgrade(url, "0006")
        assert _snapshot(url) == before
        with psycopg.connect(url) as conn:
            kind = conn.execute(
                "SELECT relkind FROM pg_class WHERE oid = 'outbox.messages'::regclass"
            ).fetchone()
            status = conn.execute(
                "SELECT messages_behind, parked_messages FROM outbox.subscription_status"
                " WHERE subscription_id = 'billing'"
            ).fetchone()
        assert kind == ("p",)
        assert status == (800 - 333, 2)
        # The identity carries on past the rolled-back positions: none is handed out twice.
        assert _append(url, "after-upgrade") == 1211

        with_new_row = _snapshot(url)
        migrations.downgrade(url, "0004")
        assert _snapshot(url) == with_new_row
        with psycopg.connect(url) as conn:
            kind = conn.execute(
                "SELECT relkind FROM pg_class WHERE oid = 'outbox.messages'::regclass"
            ).fetchone()
        assert kind == ("r",)
        assert _append(url, "after-downgrade") == 1212
    finally:
        database_factory.drop(url)
