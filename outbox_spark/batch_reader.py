"""`spark.read.format("outbox")`: the rows of `(start, end]` once, for a backfill.

The stream reader's guarantees on a fixed range, without its per-query machinery: Spark plans
a batch read in a Python worker it keeps (no Python process started per query, no offset and
commit logs). `end` is the last row below the safe frontier when the read is planned (or an
`endingOffsets` position that must not lie past it), so the range is final and a task retried
reads exactly its rows. The read keeps no subscription row, hence holds no retention back:
outbox_spark/retired_ranges.py makes it fail rather than return a range with rows missing.
"""

from collections.abc import Iterator
from typing import Any

import psycopg
import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition

from outbox.positions import Position
from outbox.read_servers import ReadProof
from outbox_spark import batches
from outbox_spark.copy_reader import APPLICATION_NAME, read_slice
from outbox_spark.options import BatchOptions, OptionError
from outbox_spark.partitions import SlicePartition
from outbox_spark.retired_ranges import mark_statement, refuse_retired
from outbox_spark.standby_reads import check_reads


class OutboxBatchReader(DataSourceReader):
    """Spark's callbacks: partitions() on the planner, read() on executors."""

    def __init__(self, options: BatchOptions) -> None:
        self.options = options

    def partitions(self) -> list[InputPartition]:
        options = self.options
        with psycopg.connect(
            options.reads.conninfo(), autocommit=True, application_name=APPLICATION_NAME
        ) as conn:
            proof = None
            if options.read_database is not None:
                with psycopg.connect(
                    options.database.conninfo(), autocommit=True, application_name=APPLICATION_NAME
                ) as database:
                    proof = check_reads(conn, database, options.read_database)
            mark = conn.execute(mark_statement(options.publication)).fetchone()
            refuse_retired(options.publication, options.start, mark)
            end = self._end(conn, proof)
            if end is None or not options.start < end:
                return []
            slices = batches.slices(
                conn,
                options.publication,
                options.start,
                end,
                options.num_partitions,
                options.partition_by,
            )
        return [SlicePartition(part, proof) for part in slices]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        task = SlicePartition.of(partition)
        options = self.options
        return read_slice(
            options.reads.conninfo(),
            options.publication,
            task.value,
            options.copy_driver,
            proof=task.proof,
            check_retired=True,
        )

    def _end(self, conn: psycopg.Connection[Any], proof: ReadProof | None) -> Position | None:
        """The read's last row: the last safe one, or endingOffsets if none is past it."""
        options = self.options
        last_safe = batches.batch_end(conn, options.publication, options.start, None, proof=proof)
        if options.end is None:
            return last_safe
        if last_safe is None or options.end > last_safe:
            raise OptionError(
                f"option endingOffsets {options.end} lies past the last row safe to read"
                f" ({last_safe or 'none after the start'}): a transaction may still commit"
                " rows below it, which this read would miss; use latest or an earlier offset"
            )
        return options.end
