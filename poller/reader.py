"""The snapshot-safe read (and, for contrast, the naive one).

Rows are read only below pg_snapshot_xmin(pg_current_snapshot()): every transaction that could
still commit a row at a lower (transaction_id, position) has ended, so keyset paging from a
checkpoint never passes a row that commits late. No gap detection is needed.
"""

from typing import Any

import psycopg

from outbox.queries import QUERIES
from poller.message import Message
from poller.positions import Position


def message_from_row(row: tuple[Any, ...]) -> Message:
    (
        position,
        transaction_id,
        publication,
        message_id,
        message_type,
        key,
        data,
        headers,
        scheduled,
    ) = row
    return Message(
        position=position,
        transaction_id=transaction_id,
        publication=publication,
        message_id=message_id,
        message_type=message_type,
        partition_key=key,
        data_text=data,
        headers_text=headers,
        scheduled=scheduled,
    )


def read_batch(
    conn: psycopg.Connection[Any], publication: str, after: Position, limit: int
) -> list[Message]:
    """Up to `limit` committed messages after `after`, in (transaction_id, position) order."""
    rows = conn.execute(QUERIES["read_batch"], _params(publication, after, limit)).fetchall()
    return [message_from_row(row) for row in rows]


async def read_batch_async(
    conn: psycopg.AsyncConnection[Any], publication: str, after: Position, limit: int
) -> list[Message]:
    cursor = await conn.execute(QUERIES["read_batch"], _params(publication, after, limit))
    return [message_from_row(row) for row in await cursor.fetchall()]


def read_batch_naive(
    conn: psycopg.Connection[Any], publication: str, after_position: int, limit: int
) -> list[Message]:
    """`position > last`: loses rows whose transaction commits after a later one. Demo only."""
    rows = conn.execute(
        QUERIES["read_batch_naive"],
        {"publication": publication, "after_position": after_position, "limit": limit},
    ).fetchall()
    return [message_from_row(row) for row in rows]


def safe_frontier(conn: psycopg.Connection[Any]) -> int:
    """The oldest transaction id still running in the cluster."""
    row = conn.execute(QUERIES["safe_frontier"]).fetchone()
    assert row is not None  # a SELECT without FROM always returns its one row
    frontier: int = row[0]
    return frontier


def _params(publication: str, after: Position, limit: int) -> dict[str, Any]:
    # xid8 has no cast from integer; it is passed as text and cast in SQL.
    return {
        "publication": publication,
        "after_transaction_id": str(after.transaction_id),
        "after_position": after.position,
        "limit": limit,
    }
