"""Small partitions, so that tests cross partition boundaries with a few hundred messages."""

from typing import Any

import psycopg
from psycopg import sql


def use_small_partitions(url: str, size: int, ahead: int = 2) -> None:
    """Replace the empty migrated partitions by partitions of `size` positions."""
    with psycopg.connect(url, autocommit=True) as conn:
        for (name,) in conn.execute("SELECT partition_name FROM outbox.message_partitions()"):
            conn.execute(sql.SQL("DROP TABLE {}").format(sql.Identifier("outbox", name)))
        conn.execute("SELECT outbox.create_message_partitions(%s, %s)", (size, ahead))


def partition_names(conn: psycopg.Connection[Any]) -> list[str]:
    rows = conn.execute("SELECT partition_name FROM outbox.message_partitions()").fetchall()
    return [name for (name,) in rows]


def positions(conn: psycopg.Connection[Any]) -> list[int]:
    rows = conn.execute("SELECT position FROM outbox.messages ORDER BY position").fetchall()
    return [position for (position,) in rows]


def move_checkpoint(conn: psycopg.Connection[Any], subscription: str, position: int) -> None:
    """Checkpoint `subscription` just after the message at `position`."""
    conn.execute(
        "UPDATE outbox.subscriptions AS s"
        " SET last_processed_transaction_id = m.transaction_id,"
        "     last_processed_position = m.position"
        " FROM outbox.messages AS m WHERE s.subscription_id = %s AND m.position = %s",
        (subscription, position),
    )
