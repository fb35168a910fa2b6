"""Where a batch ends and where it splits, asked of PostgreSQL on the driver.

A batch end is chosen in one statement below pg_snapshot_xmin(pg_current_snapshot()): every
transaction that could still commit a row at or below it has ended, so the rows of
`(start, end]` are final, and a batch replayed after a failure reads exactly the same rows.
"""

from typing import Any

import psycopg

from outbox.positions import Position
from outbox.read_servers import ReadProof, proof_parameters, server_state
from outbox_spark.options import PartitionBy
from outbox_spark.partitions import Slice, key_slices, range_slices
from outbox_spark.queries import spark_queries


def batch_end(
    conn: psycopg.Connection[Any],
    publication: str,
    after: Position,
    limit: int | None,
    *,
    proof: ReadProof | None,
) -> Position | None:
    """The last row of the next batch of at most `limit` rows (None: every safe row). On a
    read server (`proof`), raises ReadServerRefusedError unless the statement that chose it
    proved the server a standby of the primary, or the primary (outbox.read_servers): a
    promoted copy's frontier passes transactions still open on the primary."""
    parameters = {**_after(publication, after), **proof_parameters(proof)}
    if limit is None:
        # A backward index scan from the newest row: no need to walk what comes before.
        cursor = conn.execute(spark_queries()["spark_last_safe_row"], parameters)
    else:
        cursor = conn.execute(spark_queries()["spark_batch_end"], {**parameters, "limit": limit})
    row = cursor.fetchone()
    assert row is not None  # the proof's one row
    proven, transaction_id, position = row
    if not proven:
        assert proof is not None  # given none (reads on the database itself), it holds
        raise proof.refused(server_state(conn))
    return None if position is None else Position(transaction_id, position)


def split_points(
    conn: psycopg.Connection[Any], publication: str, start: Position, end: Position, slices: int
) -> list[Position]:
    """Up to `slices - 1` rows that cut `(start, end]` into slices of about equal row counts.

    Found by a few index probes, never by counting the batch (which read all of it again on
    every trigger): the k-th cut is the batch's first row at or past the k-th of evenly
    spaced positions between its first row's and `end`'s (sql/spark_queries.sql). Cuts
    lie strictly inside the batch, never at its last row, and ones that coincide (a batch of
    fewer rows than slices) come back once.
    """
    rows = conn.execute(
        spark_queries()["spark_split_points"],
        {
            **_after(publication, start),
            **end.query_parameters("until_"),
            "slices": slices,
        },
    ).fetchall()
    return [Position(*row) for row in rows]


def slices(
    conn: psycopg.Connection[Any],
    publication: str,
    after: Position,
    until: Position,
    count: int,
    partition_by: PartitionBy,
) -> list[Slice]:
    """The tasks of `(after, until]`: `count` hash buckets of the partition key, or up to
    `count` keyset ranges of equal row counts (asking the database where to cut)."""
    if partition_by is PartitionBy.KEY:
        return key_slices(after, until, count)
    points = [] if count == 1 else split_points(conn, publication, after, until, count)
    return range_slices(after, until, points)


def _after(publication: str, after: Position) -> dict[str, Any]:
    return {"publication": publication, **after.query_parameters("after_")}
