"""Appending test messages and knowing where each landed in delivery order."""

import time
from typing import Any, LiteralString

import psycopg

import outbox
from outbox.positions import Position
from poller.store.message_reads import safe_frontier


def append_in_transaction(
    conn: psycopg.Connection[Any],
    publication: str,
    count: int,
    *,
    key: str | None = None,
    message_type: str = "Tested",
) -> list[Position]:
    """Append `count` messages in the connection's current transaction; their positions."""
    positions = outbox.append_many(
        conn,
        publication,
        [outbox.NewMessage(message_type, {"n": n}, partition_key=key) for n in range(count)],
    )
    row = conn.execute("SELECT pg_current_xact_id()::text::bigint").fetchone()
    assert row is not None
    return [Position(row[0], position) for position in positions]


def append_committed(
    database_url: str, publication: str, count: int, *, key: str | None = None
) -> list[Position]:
    with psycopg.connect(database_url) as conn:
        return append_in_transaction(conn, publication, count, key=key)


def wait_until_quiet(
    database_url: str, *, but: psycopg.Connection[Any] | None = None, timeout: float = 60.0
) -> None:
    """Wait until every transaction begun before now has ended, except `but`'s own.

    The frontier is shared by every database of the server, so another test's transaction
    elsewhere holds rows back for a moment: assertions about what is readable wait here.
    """
    deadline = time.monotonic() + timeout
    with psycopg.connect(database_url, autocommit=True) as conn:
        if but is None:
            # A transaction id of our own, committed at once: everything before it must end.
            target = _scalar(conn, "SELECT pg_current_xact_id()::text::bigint") + 1
        else:
            # The frontier cannot pass a transaction still open; it can reach it.
            target = _scalar(but, "SELECT pg_current_xact_id_if_assigned()::text::bigint")
        while safe_frontier(conn) < target:
            if time.monotonic() > deadline:
                raise TimeoutError(f"transactions before {target} are still running")
            time.sleep(0.02)


def _scalar(conn: psycopg.Connection[Any], query: LiteralString) -> int:
    row = conn.execute(query).fetchone()
    assert row is not None
    assert row[0] is not None
    return int(row[0])
