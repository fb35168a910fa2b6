"""Small partitions, so that tests cross partition boundaries with a few hundred messages."""

import contextlib
from collections.abc import Iterator
from typing import Any

import psycopg
from psycopg import sql

import outbox
from outbox import NewMessage


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


@contextlib.contextmanager
def billing_over_three_partitions(url: str, size: int) -> Iterator[psycopg.Connection[Any]]:
    """Partitions of `size` positions, subscription 'billing' of 'orders', and 2.5 partitions
    of its messages (positions 1 to 2.5 x size); an autocommit connection to the database."""
    use_small_partitions(url, size)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO outbox.subscriptions (subscription_id, publication_id)"
            " VALUES ('billing', 'orders')"
        )
        with conn.transaction():
            messages = [NewMessage("T", {"n": n}) for n in range(size * 5 // 2)]
            outbox.append_many(conn, "orders", messages)
        yield conn
