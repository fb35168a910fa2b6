"""`spark.readStream.format("outbox")`: a publication as a Structured Streaming source.

The stream reader lives in a long-running Python process beside the Spark driver
(initialOffset, latestOffset, partitions, commit) and is pickled again for every task, where
only read() runs. So everything read() needs travels in the partition and the options, and
the driver's connection is opened lazily and never pickled.
"""

from collections.abc import Iterator
from typing import Any

import psycopg
import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from outbox.archive.layout import Archive
from outbox.positions import START, Position
from outbox.read_servers import ReadProof
from outbox_spark import batches, progress
from outbox_spark.archive_reads import (
    archive_batch_end,
    archive_for,
    archive_slices,
    read_archive_slice,
)
from outbox_spark.arrow_schema import SPARK_SCHEMA
from outbox_spark.batch_reader import OutboxBatchReader
from outbox_spark.copy_reader import APPLICATION_NAME, read_slice
from outbox_spark.offsets import next_end, offset_of, position_of
from outbox_spark.options import (
    OptionError,
    SourceOptions,
    check_options,
    parse_batch_options,
    parse_source_options,
)
from outbox_spark.partitions import ArchiveSlice, SlicePartition
from outbox_spark.retired_ranges import RetiredRangeError
from outbox_spark.standby_reads import check_reads


class OutboxDataSource(DataSource):
    """`spark.readStream.format("outbox")`; the options are in outbox_spark/README.md."""

    @classmethod
    def name(cls) -> str:
        return "outbox"

    def schema(self) -> StructType:
        # Spark asks for the schema at load(): checking the options here reports a mistake
        # there, not at the first trigger.
        check_options(self.options)
        return SPARK_SCHEMA

    def streamReader(self, schema: StructType) -> "OutboxStreamReader":  # noqa: N802
        _refuse_another_schema(schema)
        return OutboxStreamReader(parse_source_options(self.options))

    def reader(self, schema: StructType) -> OutboxBatchReader:
        """`spark.read.format("outbox")`: the rows of a range, once (a backfill)."""
        _refuse_another_schema(schema)
        return OutboxBatchReader(parse_batch_options(self.options))


class OutboxStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Spark's callbacks (hence their camelCase names) over the snapshot-safe read."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self._connection: psycopg.Connection[Any] | None = None
        # To a hot standby (readUrl): batch ends and split points are read there, and what
        # every batch end and slice read proves of it (None: reads on the database).
        self._read_connection: psycopg.Connection[Any] | None = None
        self._proof: ReadProof | None = None
        # Trigger.AvailableNow: the last safe row when the query started; None otherwise.
        self._ceiling: Position | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_connection"] = None  # a socket cannot travel to an executor
        state["_read_connection"] = None
        return state

    def initialOffset(self) -> dict[str, int]:  # noqa: N802
        """The start of a query without a checkpoint; also registers its subscription row.

        Spark calls it (twice, as observed on 4.3) only when the query has no offset log.
        """
        starting = self.options.starting_offsets
        if starting == "earliest":
            # With the archive, the history begins where the archive does.
            start = START if self.options.archive is None else self._archive().begins_after
        elif starting == "latest":
            start = self._batch_end(START, None) or START
        else:
            start = starting
        progress.start_subscription(
            self._conn(), self.options.subscription, self.options.publication, start
        )
        return offset_of(start)

    def getDefaultReadLimit(self) -> ReadLimit:  # noqa: N802
        rows = self.options.max_rows_per_batch
        return ReadAllAvailable() if rows is None else ReadMaxRows(rows)

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, int]:  # noqa: N802
        after = position_of(start)
        rows = _row_limit(limit)
        archived_to = self._archived_to(after)
        if archived_to is None:
            candidate = self._batch_end(after, rows)
        elif rows is None:
            candidate = max(archived_to, self._batch_end(after, None) or archived_to)
        else:
            candidate = archive_batch_end(self._read_conn(), self.options.publication, after, rows)
        return offset_of(next_end(after, candidate, self._ceiling))

    def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802
        last = self._batch_end(START, None) or START
        if self.options.archive is not None:
            last = max(last, self._archive().mark)
        self._ceiling = last

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        after, until = position_of(start), position_of(end)
        if after == until:
            return []
        options = self.options
        parts: list[InputPartition] = []
        archived_to = self._archived_to(after)
        if options.archive is not None and archived_to is not None:
            # The archive holds (after, archived_to]; the query's subscription row, at or
            # before `after`, keeps retention from dropping what follows it in the table.
            seam = min(archived_to, until)
            parts += [
                InputPartition(part)
                for part in archive_slices(
                    self._read_conn(), options.publication, options.archive, after, seam
                )
            ]
            after = seam
        if after < until:
            slices = batches.slices(
                self._read_conn(),
                options.publication,
                after,
                until,
                options.num_partitions,
                options.partition_by,
            )
            parts += [SlicePartition(part, self._proof) for part in slices]
        return parts

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if isinstance(partition.value, ArchiveSlice):
            return read_archive_slice(partition.value, self.options.publication)
        task = SlicePartition.of(partition)
        # Resolved here, on the executor: the URL (and any password) never sits in a plan.
        conninfo = self.options.reads.conninfo()
        return read_slice(
            conninfo,
            self.options.publication,
            task.value,
            self.options.copy_driver,
            proof=task.proof,
        )

    def commit(self, end: dict[str, Any]) -> None:
        progress.record_progress(
            self._conn(), self.options.subscription, self.options.publication, position_of(end)
        )

    def stop(self) -> None:
        for connection in (self._connection, self._read_connection):
            if connection is not None:
                connection.close()
        self._connection = self._read_connection = None

    def _archive(self) -> Archive:
        return archive_for(self._read_conn(), self.options.publication)

    def _archived_to(self, after: Position) -> Position | None:
        """With the archive option, its mark when it holds messages after `after`."""
        if self.options.archive is None:
            return None
        archive = self._archive()
        if after < archive.begins_after:
            raise RetiredRangeError(self.options.publication, after, archive.begins_after)
        return archive.mark if after < archive.mark else None

    def _batch_end(self, after: Position, limit: int | None) -> Position | None:
        conn = self._read_conn()  # first: connecting checks the server and sets the proof
        return batches.batch_end(conn, self.options.publication, after, limit, proof=self._proof)

    def _read_conn(self) -> psycopg.Connection[Any]:
        """Where batch ends and split points are read: the hot standby, checked once it is
        connected and proven again by every batch end (see standby_reads.py), else the
        database."""
        reads = self.options.read_database
        if reads is None:
            return self._conn()
        if self._read_connection is None or self._read_connection.closed:
            connection = _connect(reads.conninfo())
            try:
                self._proof = check_reads(connection, self._conn(), reads)
            except BaseException:
                connection.close()
                raise
            self._read_connection = connection
        return self._read_connection

    def _conn(self) -> psycopg.Connection[Any]:
        if self._connection is None or self._connection.closed:
            self._connection = _connect(self.options.database.conninfo())
        return self._connection


def _connect(conninfo: str) -> psycopg.Connection[Any]:
    # Autocommit: every statement takes a fresh snapshot, hence a fresh frontier, and the
    # driver never holds a transaction open between triggers.
    return psycopg.connect(conninfo, autocommit=True, application_name=APPLICATION_NAME)


def _refuse_another_schema(schema: StructType) -> None:
    if schema != SPARK_SCHEMA:
        raise OptionError(
            f"the outbox source has a fixed schema, {SPARK_SCHEMA.simpleString()};"
            f" do not pass .schema(...) (got {schema.simpleString()})"
        )


def _row_limit(limit: ReadLimit) -> int | None:
    if isinstance(limit, ReadAllAvailable):
        return None
    if isinstance(limit, ReadMaxRows):
        return int(limit.max_rows)
    raise ValueError(
        f"the outbox source honours ReadAllAvailable and ReadMaxRows, not {type(limit).__name__}"
    )
