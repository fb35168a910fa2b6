"""A catch-up consumer's position, stored in the consumer's own transaction.

Exactly-once projections (eventsourcing's Tracking record): the consumer writes its output and
the Checkpoint it was given in one transaction, so after any crash the stored position is
exactly after the output that committed. The table is `outbox.consumer_positions`, or one the
consumer names (same columns), in the same database as its output, which need not be the
outbox's.

A store that would not move the position forward raises ConsumerPositionConflictError, and the
caller's transaction rolls back: two processes consuming under one name cannot both commit the
same messages' output (the second waits on the first's row lock, then finds it moved).
"""

from typing import Any, LiteralString

import psycopg
from psycopg import pq, sql

from outbox.messages import check_name
from outbox.queries import QUERIES
from poller.catch_up.signals import Checkpoint

DEFAULT_TABLE = ("outbox", "consumer_positions")

# A table name: "positions", or ("schema", "positions").
TableName = str | tuple[str, str]


class ConsumerPositionConflictError(RuntimeError):
    """The stored position is already at or past the one being stored."""


class OutsideTransactionError(RuntimeError):
    """The position would commit on its own, apart from the output it stands for."""


def store_checkpoint(
    conn: psycopg.Connection[Any],
    consumer: str,
    checkpoint: Checkpoint,
    *,
    table: TableName | None = None,
) -> None:
    """Store `checkpoint` as `consumer`'s position, in `conn`'s current transaction."""
    _check_in_transaction(conn.autocommit, conn.info.transaction_status)
    row = conn.execute(
        _statement("store_consumer_position", table), _parameters(consumer, checkpoint)
    ).fetchone()
    _check_moved(row, consumer, checkpoint)


async def store_checkpoint_async(
    conn: psycopg.AsyncConnection[Any],
    consumer: str,
    checkpoint: Checkpoint,
    *,
    table: TableName | None = None,
) -> None:
    """`store_checkpoint` for an async connection."""
    _check_in_transaction(conn.autocommit, conn.info.transaction_status)
    cursor = await conn.execute(
        _statement("store_consumer_position", table), _parameters(consumer, checkpoint)
    )
    _check_moved(await cursor.fetchone(), consumer, checkpoint)


def load_checkpoint(
    conn: psycopg.Connection[Any], consumer: str, *, table: TableName | None = None
) -> Checkpoint | None:
    """`consumer`'s stored position, for `subscribe(start=...)`; None if it stored none yet."""
    row = conn.execute(
        _statement("load_consumer_position", table), {"consumer": check_name("consumer", consumer)}
    ).fetchone()
    return None if row is None else Checkpoint(*row)


async def load_checkpoint_async(
    conn: psycopg.AsyncConnection[Any], consumer: str, *, table: TableName | None = None
) -> Checkpoint | None:
    """`load_checkpoint` for an async connection."""
    cursor = await conn.execute(
        _statement("load_consumer_position", table), {"consumer": check_name("consumer", consumer)}
    )
    row = await cursor.fetchone()
    return None if row is None else Checkpoint(*row)


def _statement(name: LiteralString, table: TableName | None) -> sql.Composed:
    parts = DEFAULT_TABLE if table is None else (table,) if isinstance(table, str) else table
    return sql.SQL(QUERIES[name]).format(table=sql.Identifier(*parts))


def _parameters(consumer: str, checkpoint: Checkpoint) -> dict[str, Any]:
    if not isinstance(checkpoint, Checkpoint):
        raise TypeError(f"checkpoint={checkpoint!r} is not a poller.Checkpoint")
    return {"consumer": check_name("consumer", consumer), **checkpoint.at.query_parameters()}


def _check_in_transaction(autocommit: bool, status: pq.TransactionStatus) -> None:
    if autocommit and status == pq.TransactionStatus.IDLE:
        raise OutsideTransactionError(
            "store_checkpoint outside a transaction would commit the position apart from the"
            " output it stands for: call it inside `with conn.transaction():`"
        )


def _check_moved(row: tuple[Any, ...] | None, consumer: str, checkpoint: Checkpoint) -> None:
    if row is None:
        raise ConsumerPositionConflictError(
            f"consumer {consumer!r} already stored a position at or past {checkpoint}: another"
            " process consumes under this name, so this transaction must roll back"
        )
