"""The outbox source in Spark (local[2]) against a real PostgreSQL: exactly once, in order."""

import json
import uuid
from collections import Counter, defaultdict
from itertools import pairwise
from pathlib import Path
from typing import Any

import psycopg
import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import DataFrame, SparkSession

from outbox.positions import Position
from outbox_cli.demo.workload import WorkloadShape, run_writers
from tests.integration.spark.spark_doubles import RecordingWriter
from tests.integration.spark.writes import (
    append_committed,
    append_in_transaction,
    wait_until_quiet,
)

pytestmark = pytest.mark.spark

SHAPE = WorkloadShape(writers=6, transactions_per_writer=15, max_commit_delay=0.1, seed=5)


def outbox_stream(
    spark: SparkSession, url: str, publication: str, source: str = "outbox", **options: str
) -> DataFrame:
    return (
        spark.readStream.format(source)
        .option("url", url)
        .option("publication", publication)
        .option("subscription", f"spark-{publication}")
        .options(**options)
        .load()
    )


def positions_in(frame: DataFrame) -> Counter[int]:
    return Counter(row.position for row in frame.select("position").collect())


def subscription_row(database_url: str, subscription: str) -> tuple[Any, ...] | None:
    with psycopg.connect(database_url) as conn:
        return conn.execute(
            "SELECT last_processed_transaction_id::text::bigint, last_processed_position,"
            " settings FROM outbox.subscriptions WHERE subscription_id = %s",
            [subscription],
        ).fetchone()


def test_every_committed_row_arrives_once_while_writers_commit_out_of_order(
    spark: SparkSession, database_url: str, source_url: str
) -> None:
    sink = f"sink_{uuid.uuid4().hex}"
    query = (
        outbox_stream(spark, source_url, "orders", numPartitions="2")
        .writeStream.format("memory")
        .queryName(sink)
        .trigger(processingTime="100 milliseconds")
        .start()
    )
    try:
        query.processAllAvailable()  # the query is up and polling before the writers start
        tally = run_writers(database_url, "orders", SHAPE)
        wait_until_quiet(database_url)
        query.processAllAvailable()
        read = positions_in(spark.table(sink))
    finally:
        query.stop()

    assert tally.rolled_back, "the workload rolled nothing back"
    batches_with_rows = [p for p in query.recentProgress if p["numInputRows"]]
    assert len(batches_with_rows) > 1, "the query did not read while the writers ran"
    assert read == Counter(tally.committed)
    row = subscription_row(database_url, "spark-orders")
    assert row is not None
    assert row[2] == {"kind": "spark"}


def test_a_long_transaction_holds_later_rows_back_until_it_ends(
    spark: SparkSession, database_url: str, source_url: str, tmp_path: Path
) -> None:
    def run_available_now() -> None:
        (
            outbox_stream(spark, source_url, "orders")
            .writeStream.format("parquet")
            .option("path", str(tmp_path / "out"))
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .trigger(availableNow=True)
            .start()
            .awaitTermination()
        )

    before = append_committed(database_url, "orders", 3)
    with psycopg.connect(database_url) as long_transaction:
        held = append_in_transaction(long_transaction, "orders", 2)
        later = append_committed(database_url, "orders", 4)  # commits first, yet must wait
        with psycopg.connect(database_url) as rolled_back:
            gone = append_in_transaction(rolled_back, "orders", 2)
            rolled_back.rollback()
        wait_until_quiet(database_url, but=long_transaction)

        run_available_now()
        assert positions_in(spark.read.parquet(str(tmp_path / "out"))) == Counter(
            row.position for row in before
        )
        long_transaction.commit()
    wait_until_quiet(database_url)

    run_available_now()

    read = positions_in(spark.read.parquet(str(tmp_path / "out")))
    assert read == Counter(row.position for row in before + held + later)
    assert not set(read) & {row.position for row in gone}
    # The restart committed the first run's last offset: the row is at least there.
    row = subscription_row(database_url, "spark-orders")
    assert row is not None
    assert Position(row[0], row[1]) >= before[-1]


def test_max_rows_per_batch_under_available_now(
    spark: SparkSession, database_url: str, source_url: str
) -> None:
    rows = append_committed(database_url, "orders", 250)
    wait_until_quiet(database_url)
    sink = f"sink_{uuid.uuid4().hex}"
    query = (
        outbox_stream(spark, source_url, "orders", maxRowsPerBatch="100", numPartitions="2")
        .writeStream.format("memory")
        .queryName(sink)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()

    sizes = [progress["numInputRows"] for progress in query.recentProgress]
    assert [size for size in sizes if size] == [100, 100, 50]
    assert positions_in(spark.table(sink)) == Counter(row.position for row in rows)


def test_a_batch_failing_after_its_offsets_were_logged_is_replayed_exactly(
    spark: SparkSession, database_url: str, source_url: str, tmp_path: Path
) -> None:
    faults, output, checkpoint = tmp_path / "faults", tmp_path / "out", tmp_path / "checkpoint"
    faults.mkdir()

    first = append_committed(database_url, "orders", 300)
    wait_until_quiet(database_url)

    def run() -> None:
        (
            outbox_stream(
                spark,
                source_url,
                "orders",
                source="outbox_failing_once",
                maxRowsPerBatch="100",
                numPartitions="2",
                faultDirectory=str(faults),
                failAfter=str(first[99]),  # the end of batch 0: fail in batch 1
            )
            .writeStream.format("parquet")
            .option("path", str(output))
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
            .awaitTermination()
        )

    with pytest.raises(StreamingQueryException, match="injected failure"):
        run()
    assert (faults / "failed").exists()
    assert not (checkpoint / "commits" / "1").exists()
    logged = (checkpoint / "offsets" / "1").read_text()
    end_of_batch = {
        batch: json.loads((checkpoint / "offsets" / str(batch)).read_text().splitlines()[-1])
        for batch in (0, 1)
    }
    reads_before = len((faults / "reads.log").read_text().splitlines())

    # New rows arrive before the restart: the replay must not take them into batch 1.
    second = append_committed(database_url, "orders", 50)
    wait_until_quiet(database_url)
    run()

    # Spark kept batch 1's logged end, and the replay read exactly (end of 0, end of 1].
    assert (checkpoint / "offsets" / "1").read_text() == logged
    batch_0_end, batch_1_end = (
        Position(end_of_batch[n]["tx"], end_of_batch[n]["pos"]) for n in (0, 1)
    )
    replayed = sorted(
        (Position.parse(after), Position.parse(until))
        for after, until in (
            line.split() for line in (faults / "reads.log").read_text().splitlines()[reads_before:]
        )
        if Position.parse(until) <= batch_1_end
    )
    assert replayed[0][0] == batch_0_end
    assert replayed[-1][1] == batch_1_end
    assert all(previous[1] == following[0] for previous, following in pairwise(replayed))
    assert positions_in(spark.read.parquet(str(output))) == Counter(
        row.position for row in first + second
    )
    row = subscription_row(database_url, "spark-orders")
    assert row is not None
    assert Position(row[0], row[1]) >= batch_1_end


def test_partition_by_key_delivers_each_key_to_one_task_in_delivery_order(
    spark: SparkSession, database_url: str, source_url: str, tmp_path: Path
) -> None:
    tally = run_writers(database_url, "orders", SHAPE)
    wait_until_quiet(database_url)
    (
        outbox_stream(
            spark, source_url, "orders", partitionBy="key", numPartitions="3", maxRowsPerBatch="60"
        )
        .writeStream.foreach(RecordingWriter(tmp_path))
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
        .awaitTermination()
    )

    received: Counter[int] = Counter()
    tasks_of_key: dict[tuple[str, str], set[str]] = defaultdict(set)
    for task_file in sorted(tmp_path.glob("*.jsonl")):
        epoch = task_file.name.split("-")[0]
        order: dict[str, list[Position]] = defaultdict(list)
        for key, transaction_id, position in map(json.loads, task_file.read_text().splitlines()):
            received[position] += 1
            order[key].append(Position(transaction_id, position))
            tasks_of_key[(epoch, key)].add(task_file.name)
        for key, positions in order.items():
            assert positions == sorted(positions), f"key {key} out of order in {task_file.name}"

    assert received == Counter(tally.committed)
    assert all(len(tasks) == 1 for tasks in tasks_of_key.values())
    assert len({tasks.pop() for tasks in tasks_of_key.values()}) > 3  # keys did spread
