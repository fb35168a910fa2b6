"""The Spark source reading a hot standby (`readUrl`): batch ends, split points and slices on
the standby, the subscription row on the primary; a slice waits for its server's replay
before it reads; a read server of another cluster is refused. The readers' callbacks are
called as Spark calls them, on a real primary and standby (tests/support/replica_pair.py);
one batch read goes through Spark itself."""

import logging
import threading
from typing import Any

import psycopg
import pyarrow as pa
import pytest
from pyspark.sql import SparkSession
from pyspark.sql.datasource import InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable

from outbox.positions import START, Position
from outbox.read_servers import ReadProof, ReadServerRefusedError, server_state
from outbox_spark.batch_reader import OutboxBatchReader
from outbox_spark.copy_reader import read_slice
from outbox_spark.options import CopyDriver, parse_batch_options, parse_source_options
from outbox_spark.partitions import Slice
from outbox_spark.source import OutboxStreamReader
from tests.integration.spark.conftest import without_password
from tests.integration.spark.writes import append_committed, append_in_transaction
from tests.support.daemons import wait_until
from tests.support.replica_pair import ReplicaPair


def offset(position: Position) -> dict[str, int]:
    return {"tx": position.transaction_id, "pos": position.position}


def positions_read(batches: Any) -> list[Position]:
    table = pa.Table.from_batches(list(batches))
    columns = table.to_pydict()
    return [
        Position(tx, pos)
        for tx, pos in zip(columns["transaction_id"], columns["position"], strict=True)
    ]


def test_a_stream_reads_the_standby_and_keeps_its_progress_on_the_primary(
    replica_pair: ReplicaPair,
) -> None:
    primary, standby = replica_pair.migrated_database("spark_standby_stream")
    options = {"url": primary, "readUrl": standby, "publication": "orders"}
    reader = OutboxStreamReader(
        parse_source_options({**options, "subscription": "lake", "numPartitions": "2"})
    )
    try:
        start = reader.initialOffset()  # its subscription row: written on the primary
        with replica_pair.replay_paused():
            rows = append_committed(primary, "orders", 6)
            # The primary has them; the standby does not yet: no batch, nothing skipped.
            assert reader.latestOffset(start, ReadAllAvailable()) == start
        replica_pair.wait_replayed()
        end = reader.latestOffset(start, ReadAllAvailable())
        assert end == offset(rows[-1])
        parts = reader.partitions(start, end)
        assert len(parts) == 2  # split points, read on the standby
        read = [at for part in parts for at in positions_read(reader.read(part))]
        assert sorted(read) == rows
        reader.commit(end)
    finally:
        reader.stop()
    with psycopg.connect(primary) as conn:
        row = conn.execute(
            "SELECT last_processed_transaction_id::text::bigint, last_processed_position"
            " FROM outbox.subscriptions WHERE subscription_id = 'lake'"
        ).fetchone()
    assert row is not None
    assert Position(*row) == rows[-1]


@pytest.mark.parametrize("driver", [CopyDriver.ADBC, CopyDriver.PSYCOPG])
def test_a_slice_waits_until_its_server_has_replayed_its_end(
    replica_pair: ReplicaPair, caplog: pytest.LogCaptureFixture, driver: CopyDriver
) -> None:
    primary, standby = replica_pair.migrated_database(f"spark_standby_wait_{driver.value}")
    caplog.set_level(logging.WARNING, logger="outbox_spark.standby_reads")
    read: list[Position] = []
    with psycopg.connect(primary) as conn:
        proof = ReadProof(server_state(conn).identity, "the standby")  # as the driver made it
    with replica_pair.replay_paused():
        # Planned where the rows are (another standby, or this one before a restart); read
        # on a standby that has not replayed them yet.
        rows = append_committed(primary, "orders", 5)
        part = Slice(START, rows[-1])
        reading = threading.Thread(
            target=lambda: read.extend(
                positions_read(read_slice(standby, "orders", part, driver, proof=proof))
            )
        )
        reading.start()
        wait_until(
            lambda: any("has not replayed up to" in r.getMessage() for r in caplog.records),
            30,
            "the slice to say it waits",
        )
        assert reading.is_alive()
        assert not read
    reading.join(30)
    assert sorted(read) == rows, "a slice read before its server had replayed its end"


def test_a_stream_refuses_a_read_server_promoted_since_it_was_checked(
    replica_pair: ReplicaPair,
) -> None:
    """A transaction X open on the primary holds the standby's frontier, and so the batch end,
    below it; promoted, the copy counts X as ended, and its frontier passes the rows after X.
    The statement that chooses a batch end proves its server a standby: no batch past X."""
    primary, _ = replica_pair.migrated_database("spark_standby_promoted")
    with replica_pair.another_standby("spark_promoted") as server:
        copy = server.url("spark_standby_promoted")
        options = {"url": primary, "readUrl": copy, "publication": "orders"}
        reader = OutboxStreamReader(parse_source_options({**options, "subscription": "lake"}))
        try:
            start = reader.initialOffset()
            with psycopg.connect(primary) as open_x:
                [x] = append_in_transaction(open_x, "orders", 1)
                after_x = append_committed(primary, "orders", 2)
                replica_pair.wait_replayed(standby=server)
                assert reader.latestOffset(start, ReadAllAvailable()) == start  # X holds it
                with psycopg.connect(copy, autocommit=True) as conn:
                    conn.execute("SELECT pg_promote()")  # waits until it is done
                with pytest.raises(ReadServerRefusedError, match="not in recovery"):
                    reader.latestOffset(start, ReadAllAvailable())
        finally:
            reader.stop()
    assert x < after_x[0]


@pytest.mark.parametrize("driver", [CopyDriver.ADBC, CopyDriver.PSYCOPG])
def test_a_slice_refuses_a_server_promoted_before_it_replayed_the_slice(
    replica_pair: ReplicaPair, driver: CopyDriver
) -> None:
    """The batch is planned on a standby that has its rows; a task's server is another one,
    cut off before them and promoted, whose own transactions carried its frontier past the
    slice's end: its replay check passes, and its slice would come back without the rows.
    The check proves its server a standby in the same statement: the task fails instead."""
    primary, standby = replica_pair.migrated_database(f"spark_slice_promoted_{driver.value}")
    with replica_pair.another_standby(f"slice_promoted_{driver.value}") as server:
        copy = server.url(f"spark_slice_promoted_{driver.value}")
        replica_pair.stop_streaming(server)
        rows = append_committed(primary, "orders", 4)
        replica_pair.wait_replayed()
        options = {
            "url": primary,
            "publication": "orders",
            "subscription": "lake",
            "numPartitions": "1",
        }
        planner = OutboxStreamReader(parse_source_options({**options, "readUrl": standby}))
        try:
            start = planner.initialOffset()
            end = planner.latestOffset(start, ReadAllAvailable())
            [part] = planner.partitions(start, end)
        finally:
            planner.stop()
        assert end == offset(rows[-1])
        with psycopg.connect(copy, autocommit=True) as conn:
            conn.execute("SELECT pg_promote()")
            while server_state(conn).frontier <= rows[-1].transaction_id:
                conn.execute("SELECT pg_current_xact_id()")  # one transaction each
        executor = OutboxStreamReader(
            parse_source_options({**options, "readUrl": copy, "copyDriver": driver.value})
        )
        with pytest.raises(ReadServerRefusedError, match="not in recovery"):
            list(executor.read(part))  # the copy has none of the slice's 4 rows


def test_a_read_server_of_another_cluster_is_refused(
    replica_pair: ReplicaPair, database_url: str
) -> None:
    primary, _ = replica_pair.migrated_database("spark_standby_refused")
    other = without_password(database_url)
    options = {"url": primary, "readUrl": other, "publication": "orders"}
    stream = OutboxStreamReader(parse_source_options({**options, "subscription": "lake"}))
    try:
        with pytest.raises(ReadServerRefusedError, match="option readUrl refused: it is not a"):
            stream.latestOffset(offset(START), ReadAllAvailable())
    finally:
        stream.stop()
    with pytest.raises(ReadServerRefusedError, match="not a copy of the primary's cluster"):
        OutboxBatchReader(parse_batch_options(options)).partitions()


@pytest.mark.spark
def test_a_batch_read_through_spark_reads_the_standby(
    spark: SparkSession, replica_pair: ReplicaPair
) -> None:
    primary, standby = replica_pair.migrated_database("spark_standby_batch")
    rows = append_committed(primary, "orders", 7)
    replica_pair.wait_replayed()
    reader = OutboxBatchReader(
        parse_batch_options({"url": primary, "readUrl": standby, "publication": "orders"})
    )
    assert [InputPartition(p.value) for p in reader.partitions()]  # planned on the standby
    frame = (
        spark.read.format("outbox")
        .option("url", primary)
        .option("readUrl", standby)
        .option("publication", "orders")
        .option("numPartitions", "2")
        .load()
    )
    assert sorted(Position(r.transaction_id, r.position) for r in frame.collect()) == rows
