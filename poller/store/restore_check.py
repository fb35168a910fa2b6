"""Noticing a database restored from a dump into another cluster, before delivering from it.

A restore brings the stored transaction ids (checkpoints, messages, parked rows) but not the
cluster's transaction counter, which starts over lower. The snapshot rule reads a row only
below the oldest running transaction, so the restored rows would stay hidden, and new messages
would sort behind the checkpoints: delivery would stop without a word. No id a cluster has
not assigned yet can be stored legitimately (`outbox seek` refuses one), so a stored id at or
above the next one proves a restore; the daemon stops and the operator runs `outbox rebase`.
"""

from typing import Any

import psycopg

from outbox.queries import load_queries

RESTORE_QUERIES = load_queries("restore_queries.sql")


class RestoredDatabaseError(LookupError):
    """The database holds transaction ids this cluster has not assigned yet."""


def check_not_restored(subscription: str, row: tuple[Any, ...] | None) -> None:
    """Raises RestoredDatabaseError when the row of `transaction_ids_ahead` proves a restore."""
    if row is None or row[0] is None:
        return
    highest_stored, next_assigned = row
    if highest_stored >= next_assigned:
        raise RestoredDatabaseError(
            f"subscription {subscription!r} holds transaction id {highest_stored}, but this"
            f" cluster has only reached {next_assigned}: the database was restored into another"
            " cluster, and delivering now would hide every message. Stop every daemon, then run"
            " `outbox rebase` once"
        )


def ensure_not_restored(conn: psycopg.Connection[Any], subscription: str) -> None:
    row = conn.execute(
        RESTORE_QUERIES["transaction_ids_ahead"], {"subscription": subscription}
    ).fetchone()
    check_not_restored(subscription, row)


async def ensure_not_restored_async(conn: psycopg.AsyncConnection[Any], subscription: str) -> None:
    cursor = await conn.execute(
        RESTORE_QUERIES["transaction_ids_ahead"], {"subscription": subscription}
    )
    check_not_restored(subscription, await cursor.fetchone())
