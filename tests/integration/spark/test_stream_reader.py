"""The stream reader's callbacks, called as Spark calls them, on a real PostgreSQL, no Spark."""

import pickle
from collections.abc import Iterator

import psycopg
import pyarrow as pa
import pytest
from pyspark.sql.datasource import InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, ReadMinRows

from outbox.positions import Position
from outbox_spark.options import parse_source_options
from outbox_spark.partitions import Slice
from outbox_spark.source import OutboxDataSource, OutboxStreamReader
from tests.integration.spark.writes import append_committed, wait_until_quiet


@pytest.fixture
def reader_options(source_url: str) -> dict[str, str]:
    return {"url": source_url, "publication": "orders", "subscription": "lake"}


@pytest.fixture
def reader(reader_options: dict[str, str]) -> Iterator[OutboxStreamReader]:
    stream_reader = OutboxStreamReader(parse_source_options(reader_options))
    yield stream_reader
    stream_reader.stop()


def offset(position: Position) -> dict[str, int]:
    return {"tx": position.transaction_id, "pos": position.position}


def checkpoint_of(database_url: str) -> Position:
    with psycopg.connect(database_url) as conn:
        row = conn.execute(
            "SELECT last_processed_transaction_id::text::bigint, last_processed_position"
            " FROM outbox.subscriptions WHERE subscription_id = 'lake'"
        ).fetchone()
    assert row is not None
    return Position(*row)


@pytest.mark.parametrize("starting", ["earliest", "latest", "checkpoint"])
def test_the_initial_offset_registers_the_subscription_there(
    reader_options: dict[str, str], database_url: str, starting: str
) -> None:
    rows = append_committed(database_url, "orders", 3)
    wait_until_quiet(database_url)
    expected = {"earliest": Position(0, 0), "latest": rows[-1], "checkpoint": rows[0]}[starting]
    text = str(rows[0]) if starting == "checkpoint" else starting
    reader = OutboxStreamReader(parse_source_options({**reader_options, "startingOffsets": text}))
    try:
        assert reader.initialOffset() == offset(expected)
    finally:
        reader.stop()
    assert checkpoint_of(database_url) == expected


def test_latest_offset_honours_the_row_limit_spark_passes(
    reader: OutboxStreamReader, database_url: str
) -> None:
    rows = append_committed(database_url, "orders", 5)
    wait_until_quiet(database_url)
    start = reader.initialOffset()
    assert reader.getDefaultReadLimit() == ReadAllAvailable()
    assert reader.latestOffset(start, ReadMaxRows(2)) == offset(rows[1])
    assert reader.latestOffset(offset(rows[1]), ReadMaxRows(2)) == offset(rows[3])
    assert reader.latestOffset(start, ReadAllAvailable()) == offset(rows[-1])
    assert reader.latestOffset(offset(rows[-1]), ReadAllAvailable()) == offset(rows[-1])
    with pytest.raises(ValueError, match="not ReadMinRows"):
        reader.latestOffset(start, ReadMinRows(2))


def test_max_rows_per_batch_is_the_default_read_limit(reader_options: dict[str, str]) -> None:
    options = parse_source_options({**reader_options, "maxRowsPerBatch": "7"})
    assert OutboxStreamReader(options).getDefaultReadLimit() == ReadMaxRows(7)


def test_available_now_stops_at_what_was_safe_when_it_was_prepared(
    reader: OutboxStreamReader, database_url: str
) -> None:
    first = append_committed(database_url, "orders", 3)
    wait_until_quiet(database_url)
    start = reader.initialOffset()
    reader.prepareForTriggerAvailableNow()
    append_committed(database_url, "orders", 3)  # committed after: not part of this run
    wait_until_quiet(database_url)

    assert reader.latestOffset(start, ReadMaxRows(2)) == offset(first[1])
    assert reader.latestOffset(offset(first[1]), ReadMaxRows(2)) == offset(first[2])
    assert reader.latestOffset(offset(first[2]), ReadAllAvailable()) == offset(first[2])


def read_all(reader: OutboxStreamReader, partitions: list[InputPartition]) -> list[list[int]]:
    clone = pickle.loads(pickle.dumps(reader))  # as each task receives it
    return [
        [
            position
            for batch in clone.read(partition)
            for position in pa.Table.from_batches([batch]).column("position").to_pylist()
        ]
        for partition in partitions
    ]


def test_partitions_tile_the_batch_and_tasks_read_them(
    reader_options: dict[str, str], database_url: str
) -> None:
    rows = append_committed(database_url, "orders", 9)
    wait_until_quiet(database_url)
    start, end = offset(Position(0, 0)), offset(rows[-1])
    for partition_by in ("range", "key"):
        options = {**reader_options, "numPartitions": "3", "partitionBy": partition_by}
        reader = OutboxStreamReader(parse_source_options(options))
        try:
            assert reader.partitions(end, end) == []
            partitions = reader.partitions(start, end)
            slices = [partition.value for partition in partitions]
            assert all(isinstance(part, Slice) for part in slices)
            read = read_all(reader, partitions)
        finally:
            reader.stop()
        assert sorted(position for task in read for position in task) == [
            row.position for row in rows
        ]
        if partition_by == "range":
            assert [len(task) for task in read] == [3, 3, 3]


def test_commit_moves_the_subscription_forward_only(
    reader: OutboxStreamReader, database_url: str
) -> None:
    rows = append_committed(database_url, "orders", 3)
    reader.initialOffset()
    reader.commit(offset(rows[1]))
    reader.commit(offset(rows[0]))  # never sent by Spark; and it must not move back
    assert checkpoint_of(database_url) == rows[1]


def test_a_pickled_reader_leaves_its_connection_behind(reader: OutboxStreamReader) -> None:
    reader.initialOffset()  # opens the driver's connection
    clone = pickle.loads(pickle.dumps(reader))
    assert clone._connection is None
    assert clone.options == reader.options


def test_bad_options_fail_when_the_stream_is_loaded(reader_options: dict[str, str]) -> None:
    source = OutboxDataSource({**reader_options, "numPartitions": "zero"})
    with pytest.raises(ValueError, match="option numPartitions must be a positive integer"):
        source.schema()
