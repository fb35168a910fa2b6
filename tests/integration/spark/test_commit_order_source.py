"""Spark reads a key's messages in the order their transactions committed: the two writers of
tests/support/locked_writers.py, read by `spark.readStream` and `spark.read` with
`partitionBy=key`, where a key's rows reach one task in the order the source reads them."""

import json
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from tests.integration.spark.spark_doubles import RecordingWriter
from tests.integration.spark.test_batch_read import batch_read
from tests.integration.spark.test_spark_source import outbox_stream
from tests.integration.spark.writes import wait_until_quiet
from tests.support.locked_writers import append_through_a_row_lock

pytestmark = pytest.mark.spark


def test_the_stream_gives_a_key_its_messages_in_commit_order(
    spark: SparkSession, database_url: str, source_url: str, tmp_path: Path
) -> None:
    pair = append_through_a_row_lock(database_url)
    wait_until_quiet(database_url)
    (
        outbox_stream(spark, source_url, "orders", partitionBy="key", numPartitions="2")
        .writeStream.foreach(RecordingWriter(tmp_path))
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
        .awaitTermination()
    )
    records = [
        json.loads(line)
        for task_file in sorted(tmp_path.glob("*.jsonl"))
        for line in task_file.read_text().splitlines()
    ]
    assert [record[2] for record in records] == [pair.first.position, pair.second.position]


def test_a_batch_read_gives_a_key_its_messages_in_commit_order(
    spark: SparkSession, database_url: str, source_url: str
) -> None:
    pair = append_through_a_row_lock(database_url)
    wait_until_quiet(database_url)
    rows = batch_read(spark, source_url, "orders", partitionBy="key", numPartitions="2").collect()
    assert [row.message_id for row in rows] == pair.message_ids
