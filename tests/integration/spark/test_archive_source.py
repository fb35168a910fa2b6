"""Spark's source with the archive option: the archived rows and the table's as one history,
with no gap and no duplicate at the seam, while retention drops what the archive holds."""

import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import psycopg
import pytest
from pyspark.sql import SparkSession

from outbox.positions import START, Position
from outbox_spark.copy_reader import read_slice
from outbox_spark.options import CopyDriver
from outbox_spark.partitions import Slice
from outbox_spark.retired_ranges import RetiredRangeError
from poller.daemon.options import DaemonOptions
from poller.retention import retention_pass
from tests.integration.spark.writes import wait_until_quiet
from tests.support.archives import archive_ranges
from tests.support.partitions import billing_over_three_partitions, move_checkpoint

pytestmark = pytest.mark.spark

SIZE = 100
NO_AGE = DaemonOptions(retention_minimum_age=0.001, partition_size=SIZE, partitions_ahead=2)
COLUMNS = ("position", "transaction_id", "message_id", "partition_key", "data", "appended_at")


def history(conn: psycopg.Connection[Any]) -> list[tuple[Any, ...]]:
    rows = conn.execute(
        "SELECT position, transaction_id::text::bigint, message_id, partition_key, data::text,"
        " appended_at FROM outbox.messages ORDER BY transaction_id, position"
    ).fetchall()
    return [(*row[:5], row[5].replace(tzinfo=None)) for row in rows]


def read(frame: Any) -> list[tuple[Any, ...]]:
    return sorted(
        (tuple(getattr(row, column) for column in COLUMNS) for row in frame.collect()),
        key=lambda row: (row[1], row[0]),
    )


@pytest.fixture
def archived(database_url: str, tmp_path: Path) -> Any:
    """Positions 1 to 250 in partitions of 100, 'orders' archived up to 200 in ranges of 60
    (files of 25), the partition of 0 to 99 retired: the history before and the connection."""
    with billing_over_three_partitions(database_url, SIZE) as conn:
        before = history(conn)
        archive_ranges(database_url, "orders", tmp_path.as_uri(), rows_per_range=50, ranges=4)
        move_checkpoint(conn, "billing", 250)
        assert [r.outcome for r in retention_pass(conn, NO_AGE).retired] == ["retired", "retired"]
        yield before, conn


def test_a_batch_read_returns_the_archive_and_the_table_as_one_history(
    spark: SparkSession, archived: Any, source_url: str, database_url: str, tmp_path: Path
) -> None:
    before, _ = archived
    wait_until_quiet(database_url)
    frame = (
        spark.read.format("outbox")
        .option("url", source_url)
        .option("publication", "orders")
        .option("archive", tmp_path.as_uri())
        .option("numPartitions", "2")
        .load()
    )
    assert read(frame) == before
    # Without the archive, today's refusal stays.
    plain = spark.read.format("outbox").option("url", source_url).option("publication", "orders")
    with pytest.raises(Exception, match="retention dropped its messages up to"):
        plain.load().collect()


def test_a_stream_reads_the_archive_then_the_table_in_batches_once_each(
    spark: SparkSession, archived: Any, source_url: str, database_url: str, tmp_path: Path
) -> None:
    before, conn = archived
    wait_until_quiet(database_url)
    output = Path(tempfile.mkdtemp(dir=tmp_path))
    query = (
        spark.readStream.format("outbox")
        .option("url", source_url)
        .option("publication", "orders")
        .option("subscription", "lake-stream")
        .option("archive", tmp_path.as_uri())
        .option("maxRowsPerBatch", "120")
        .load()
        .writeStream.format("parquet")
        .option("path", str(output / "out"))
        .option("checkpointLocation", str(output / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    assert [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]] == [150, 50, 50]
    assert read(spark.read.parquet(str(output / "out"))) == before
    # Its subscription row kept retention off what it had still to read.
    assert (
        conn.execute(
            "SELECT last_processed_position FROM outbox.subscriptions"
            " WHERE subscription_id = 'lake-stream'"
        ).fetchone()
        is not None
    )


@pytest.mark.parametrize("driver", [CopyDriver.ADBC, CopyDriver.PSYCOPG])
def test_a_slice_whose_rows_retention_drops_after_the_plan_takes_them_from_the_archive(
    database_url: str, source_url: str, tmp_path: Path, driver: CopyDriver
) -> None:
    with billing_over_three_partitions(database_url, SIZE) as conn:
        before = [Position(row[1], row[0]) for row in history(conn)]
        archive_ranges(database_url, "orders", tmp_path.as_uri(), rows_per_range=80)
        # Planned before retention: one slice over the whole history, as a batch read's.
        part = Slice(START, before[-1])
        move_checkpoint(conn, "billing", 250)
        assert [r.outcome for r in retention_pass(conn, NO_AGE).retired] == ["retired", "retired"]
        left = conn.execute("SELECT count(*) FROM outbox.messages").fetchone()
    assert left == (51,)

    batches = read_slice(
        source_url,
        "orders",
        part,
        driver,
        proof=None,
        check_retired=True,
        archive=tmp_path.as_uri(),
    )
    rows = Counter(
        Position(tx, pos)
        for batch in batches
        for tx, pos in zip(
            batch.column("transaction_id").to_pylist(),
            batch.column("position").to_pylist(),
            strict=True,
        )
    )
    assert rows == Counter(before)  # 0 lost, 0 twice
    with pytest.raises(RetiredRangeError):
        list(read_slice(source_url, "orders", part, driver, proof=None, check_retired=True))


def test_the_archive_option_is_refused_with_key_partitions_or_without_an_archive(
    spark: SparkSession, source_url: str, tmp_path: Path
) -> None:
    def reader() -> Any:
        return (
            spark.read.format("outbox")
            .option("url", source_url)
            .option("publication", "orders")
            .option("archive", tmp_path.as_uri())
        )

    with pytest.raises(Exception, match="option archive reads with partitionBy range only"):
        reader().option("partitionBy", "key").load()
    with pytest.raises(Exception, match="publication 'orders' has no archive"):
        reader().load().collect()
