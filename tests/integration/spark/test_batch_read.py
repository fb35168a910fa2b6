"""`spark.read.format("outbox")`: a range read once, with the stream's snapshot rule, and
never a range retention has cut into."""

from collections import Counter
from typing import Any

import psycopg
import pytest
from pyspark.sql import DataFrame, SparkSession

from outbox.positions import Position
from poller.daemon.options import DaemonOptions
from poller.retention import retention_pass
from tests.integration.spark.writes import (
    append_committed,
    append_in_transaction,
    wait_until_quiet,
)
from tests.support.partitions import billing_over_three_partitions, move_checkpoint

pytestmark = pytest.mark.spark


def batch_read(spark: SparkSession, url: str, publication: str, **options: str) -> DataFrame:
    return (
        spark.read.format("outbox")
        .option("url", url)
        .option("publication", publication)
        .options(**options)
        .load()
    )


def offsets_read(frame: DataFrame) -> Counter[Position]:
    return Counter(Position(r.transaction_id, r.position) for r in frame.collect())


def test_consecutive_backfills_read_every_commit_once_whatever_the_commit_order(
    spark: SparkSession, database_url: str, source_url: str
) -> None:
    before = append_committed(database_url, "orders", 3)
    with psycopg.connect(database_url) as long_transaction:
        held = append_in_transaction(long_transaction, "orders", 2)
        later = append_committed(database_url, "orders", 4)  # commits first, read later
        wait_until_quiet(database_url, but=long_transaction)

        first_frame = batch_read(spark, source_url, "orders", numPartitions="2")
        first = offsets_read(first_frame)
        assert first == Counter(before)  # `later` waits behind the open transaction
        # Where the next read starts, as outbox_spark/README.md shows: the last row read.
        last = first_frame.selectExpr("max(struct(transaction_id, position)) AS end").first()
        long_transaction.commit()
    wait_until_quiet(database_url)

    assert last is not None
    start = f"{last.end.transaction_id}:{last.end.position}"
    second = offsets_read(batch_read(spark, source_url, "orders", startingOffsets=start))

    assert first + second == Counter(before + held + later)


def test_an_ending_offset_bounds_the_read_and_one_past_the_frontier_is_refused(
    spark: SparkSession, database_url: str, source_url: str
) -> None:
    rows = append_committed(database_url, "orders", 6)
    wait_until_quiet(database_url)
    end = rows[3]
    frame = batch_read(
        spark,
        source_url,
        "orders",
        startingOffsets=f'{{"tx": {rows[0].transaction_id}, "pos": {rows[0].position}}}',
        endingOffsets=f"{end.transaction_id}:{end.position}",
        partitionBy="key",
        numPartitions="3",
    )
    assert offsets_read(frame) == Counter(rows[1:4])

    with psycopg.connect(database_url) as open_transaction:
        unsafe = append_in_transaction(open_transaction, "orders", 1)[0]
        with pytest.raises(
            Exception, match=r"endingOffsets .* lies past the last row safe to read"
        ):
            batch_read(
                spark,
                source_url,
                "orders",
                endingOffsets=f"{unsafe.transaction_id}:{unsafe.position}",
            ).collect()


def test_a_range_retention_dropped_rows_of_is_refused_naming_where_to_start(
    spark: SparkSession, database_url: str, source_url: str
) -> None:
    size = 100
    with billing_over_three_partitions(database_url, size) as conn:
        move_checkpoint(conn, "billing", 150)
        options = DaemonOptions(retention_minimum_age=0.001, partition_size=size)
        assert [r.outcome for r in retention_pass(conn, options).retired] == ["retired"]
        mark = mark_of(conn)
    wait_until_quiet(database_url)

    with pytest.raises(Exception, match=f"retention dropped its messages up to {mark}"):
        batch_read(spark, source_url, "orders").collect()
    after_mark = batch_read(
        spark, source_url, "orders", startingOffsets=f"{mark.transaction_id}:{mark.position}"
    )
    assert sorted(r.position for r in after_mark.collect()) == list(range(100, 251))


def mark_of(conn: psycopg.Connection[Any]) -> Position:
    row = conn.execute(
        "SELECT transaction_id::text::bigint, position FROM outbox.retired_positions"
        " WHERE publication_id = 'orders'"
    ).fetchone()
    assert row is not None
    return Position(*row)
