"""A catch-up consumer's position, stored in the consumer's own transaction.

Exactly-once projections (eventsourcing's Tracking record): the consumer writes its output and
the Checkpoint it was given in one transaction, so after any crash the stored position is
exactly after the output that committed. The table is `outbox.consumer_positions`, or one the
consumer names (same columns), in the same database as its output, which need not be the
outbox's.

A store is a compare-and-set: it names the position the consumer started from (`previous`:
what it loaded, or what it stored last; None before its first store) and moves the stored one
only from there. Otherwise it raises ConsumerPositionConflictError and the caller's transaction
rolls back: two processes that started from the same position cannot both commit output for
the messages after it, however far ahead either stores (the second waits on the first's row
lock, then finds the row moved). Comparing only "forward of what is stored" would let the
second commit a position ahead of the first's, with the first's messages counted twice.
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
    """The stored position is not the one this consumer started from: another process stored
    one meanwhile, so this transaction's output must roll back."""


class OutsideTransactionError(RuntimeError):
    """The position would commit on its own, apart from the output it stands for."""


def store_checkpoint(
    conn: psycopg.Connection[Any],
    consumer: str,
    checkpoint: Checkpoint,
    *,
    previous: Checkpoint | None,
    table: TableName | None = None,
) -> None:
    """Store `checkpoint` as `consumer`'s position, in `conn`'s current transaction, if the
    stored one is still `previous` (the position this consumer started from: loaded, or
    stored last; None if it had none). Raises ConsumerPositionConflictError otherwise."""
    _check_in_transaction(conn.autocommit, conn.info.transaction_status)
    query, parameters = _store(consumer, checkpoint, previous, table)
    if conn.execute(query, parameters).fetchone() is None:
        stored = load_checkpoint(conn, consumer, table=table)
        raise _conflict(consumer, stored, previous)


async def store_checkpoint_async(
    conn: psycopg.AsyncConnection[Any],
    consumer: str,
    checkpoint: Checkpoint,
    *,
    previous: Checkpoint | None,
    table: TableName | None = None,
) -> None:
    """`store_checkpoint` for an async connection."""
    _check_in_transaction(conn.autocommit, conn.info.transaction_status)
    query, parameters = _store(consumer, checkpoint, previous, table)
    cursor = await conn.execute(query, parameters)
    if await cursor.fetchone() is None:
        stored = await load_checkpoint_async(conn, consumer, table=table)
        raise _conflict(consumer, stored, previous)


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


def _store(
    consumer: str, checkpoint: Checkpoint, previous: Checkpoint | None, table: TableName | None
) -> tuple[sql.Composed, dict[str, Any]]:
    """The compare-and-set: an insert that finds no row for a first store, else an update
    from `previous`."""
    if not isinstance(checkpoint, Checkpoint):
        raise TypeError(f"checkpoint={checkpoint!r} is not a poller.Checkpoint")
    parameters = {"consumer": check_name("consumer", consumer), **checkpoint.at.query_parameters()}
    if previous is None:
        return _statement("insert_consumer_position", table), parameters
    if not isinstance(previous, Checkpoint):
        raise TypeError(f"previous={previous!r} is not a poller.Checkpoint or None")
    if not checkpoint.at > previous.at:
        # Storing behind the start would deliver what was output again after a restart.
        raise ValueError(f"checkpoint {checkpoint} does not move forward from {previous}")
    parameters |= previous.at.query_parameters("previous_")
    return _statement("store_consumer_position", table), parameters


def _check_in_transaction(autocommit: bool, status: pq.TransactionStatus) -> None:
    if autocommit and status == pq.TransactionStatus.IDLE:
        raise OutsideTransactionError(
            "store_checkpoint outside a transaction would commit the position apart from the"
            " output it stands for: call it inside `with conn.transaction():`"
        )


def _conflict(
    consumer: str, stored: Checkpoint | None, previous: Checkpoint | None
) -> ConsumerPositionConflictError:
    return ConsumerPositionConflictError(
        f"consumer {consumer!r} has stored {stored or 'none'}, not {previous or 'none'} that"
        " this process started from: another process consumes under this name, so this"
        " transaction must roll back"
    )
