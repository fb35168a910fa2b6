"""The snapshot-safe read (and, for contrast, the naive one).

Rows are read only below pg_snapshot_xmin(pg_current_snapshot()): every transaction that could
still commit a row at a lower (transaction_id, position) has ended, so keyset paging from a
checkpoint never passes a row that commits late. No gap detection is needed.
"""

from typing import Any

import psycopg

from outbox.positions import Position
from outbox.queries import QUERIES
from poller.message import Message


def message_from_row(row: tuple[Any, ...]) -> Message:
    """A Message from the columns of the read query (`{{message_columns}}`), in their order."""
    return Message.from_row(row)


# outbox.messages is partitioned, so the read's order comes from merging each partition's
# index scan (Merge Append). When the planner thinks few rows follow the checkpoint (every
# row of one large transaction: a row comparison is estimated on its first column alone; or
# a backlog newer than the last ANALYZE), it appends the partitions and sorts all that
# follows instead, and every page then costs the whole backlog: a 1M-row backlog written in
# one transaction drained at 2.5k rows/s. Sorts off, it merges whatever it estimates.
#
# TimeZone UTC, with rows in binary: psycopg builds `appended_at` on its fast path only for
# UTC exactly (a named zone, even Etc/UTC, goes through zoneinfo); that datetime was 0.85 of
# the 1.05 us a row cost to fetch, and binary rows skip parsing the numbers and the time
# from text. Fetching 500 rows: 1.05 -> 0.29 us a row. `appended_at` is the same instant.
#
# JIT off: sorts off put their disabling cost on any plan that still has one (a shard's read
# sorts the few rows its two lateral parts return), and past jit_above_cost PostgreSQL
# compiled that plan on every execution: 250 ms for a 500-row shard read, 2.6 ms without.
#
# One generic plan: psycopg prepares a query at its fifth execution, but PostgreSQL went on
# planning each execution afresh (a custom plan every time; pg_prepared_statements showed no
# generic one), and planning a read past the last analyzed row probes the end of the index for
# its highest value (get_actual_variable_range), through the rows writers have just added
# there: an empty read of a 100k-row publication cost 1.3-1.7 ms with custom plans, 0.12-0.22
# with the generic plan (the same plan: sorts are off, each partition's index is merged).
READER_SETTINGS = (
    "SET enable_sort = off",
    "SET TimeZone = 'UTC'",
    "SET jit = off",
    "SET plan_cache_mode = force_generic_plan",
)


def prepare_reader(conn: psycopg.Connection[Any]) -> None:
    """Set up an autocommit connection that runs the read_batch query (once, after connecting)."""
    for setting in READER_SETTINGS:
        conn.execute(setting)


async def prepare_reader_async(conn: psycopg.AsyncConnection[Any]) -> None:
    for setting in READER_SETTINGS:
        await conn.execute(setting)


def read_batch(
    conn: psycopg.Connection[Any], publication: str, after: Position, limit: int
) -> list[Message]:
    """Up to `limit` committed messages after `after`, in (transaction_id, position) order."""
    query = QUERIES["read_batch"]
    rows = conn.execute(query, _params(publication, after, limit), binary=True).fetchall()
    return [message_from_row(row) for row in rows]


async def read_batch_async(
    conn: psycopg.AsyncConnection[Any], publication: str, after: Position, limit: int
) -> list[Message]:
    query = QUERIES["read_batch"]
    cursor = await conn.execute(query, _params(publication, after, limit), binary=True)
    return [message_from_row(row) for row in await cursor.fetchall()]


def safe_frontier(conn: psycopg.Connection[Any]) -> int:
    """The oldest transaction id still running in the cluster."""
    row = conn.execute(QUERIES["safe_frontier"]).fetchone()
    assert row is not None  # a SELECT without FROM always returns its one row
    frontier: int = row[0]
    return frontier


async def safe_frontier_async(conn: psycopg.AsyncConnection[Any]) -> int:
    return await transaction_id_async(conn, "safe_frontier")


async def transaction_id_async(conn: psycopg.AsyncConnection[Any], query: str) -> int:
    """The transaction id a named one-row query (safe_frontier, next_transaction_id) returns."""
    cursor = await conn.execute(QUERIES[query])
    row = await cursor.fetchone()
    assert row is not None  # a SELECT without FROM always returns its one row
    transaction_id: int = row[0]
    return transaction_id


def _params(publication: str, after: Position, limit: int) -> dict[str, Any]:
    return {"publication": publication, **after.query_parameters("after_"), "limit": limit}
