"""`spark.read.format("outbox")`: the rows of `(start, end]` once, for a backfill.

The stream reader's guarantees on a fixed range, without its per-query machinery: Spark plans
a batch read in a Python worker it keeps (no Python process started per query, no offset and
commit logs). `end` is the last row below the safe frontier when the read is planned (or an
`endingOffsets` position that must not lie past it), so the range is final and a task retried
reads exactly its rows. The read keeps no subscription row, hence holds no retention back:
outbox_spark/retired_ranges.py makes it fail rather than return a range with rows missing, or
with the `archive` option the archive serves what was dropped (outbox_spark/archive_reads.py).
"""

from collections.abc import Iterator
from typing import Any

import psycopg
import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition

from outbox.positions import Position
from outbox.read_servers import ReadProof
from outbox_spark import batches
from outbox_spark.archive_reads import archive_for, archive_slices, read_archive_slice
from outbox_spark.copy_reader import APPLICATION_NAME, read_slice
from outbox_spark.options import BatchOptions, OptionError
from outbox_spark.partitions import ArchiveSlice, SlicePartition
from outbox_spark.retired_ranges import RetiredRangeError, mark_statement, refuse_retired
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
            archived_to = self._archived_to(conn)
            end = self._end(conn, archived_to, proof)
            if end is None or not options.start < end:
                return []
            parts: list[InputPartition] = []
            table_from = options.start
            if options.archive is not None and archived_to is not None:
                # What the archive holds is read from it; the table holds the rest.
                table_from = min(archived_to, end)
                parts += [
                    InputPartition(part)
                    for part in archive_slices(
                        conn, options.publication, options.archive, options.start, table_from
                    )
                ]
            if table_from < end:
                slices = batches.slices(
                    conn,
                    options.publication,
                    table_from,
                    end,
                    options.num_partitions,
                    options.partition_by,
                )
                parts += [SlicePartition(part, proof) for part in slices]
        return parts

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        options = self.options
        if isinstance(partition.value, ArchiveSlice):
            return read_archive_slice(partition.value, options.publication)
        task = SlicePartition.of(partition)
        return read_slice(
            options.reads.conninfo(),
            options.publication,
            task.value,
            options.copy_driver,
            proof=task.proof,
            check_retired=True,
            archive=options.archive,
        )

    def _archived_to(self, conn: psycopg.Connection[Any]) -> Position | None:
        """With the archive option: the archive's mark, when it holds messages after the
        start. Without it: None, once retention is found to have dropped none after it."""
        options = self.options
        if options.archive is None:
            mark = conn.execute(mark_statement(options.publication)).fetchone()
            refuse_retired(options.publication, options.start, mark)
            return None
        archive = archive_for(conn, options.publication)
        if options.start < archive.begins_after:
            raise RetiredRangeError(options.publication, options.start, archive.begins_after)
        return archive.mark if options.start < archive.mark else None

    def _end(
        self, conn: psycopg.Connection[Any], archived_to: Position | None, proof: ReadProof | None
    ) -> Position | None:
        """The read's last row: the last safe one (in the table, or the archive's last), or
        endingOffsets if none is past it."""
        options = self.options
        last_safe = batches.batch_end(conn, options.publication, options.start, None, proof=proof)
        if archived_to is not None and (last_safe is None or last_safe < archived_to):
            last_safe = archived_to
        if options.end is None:
            return last_safe
        if last_safe is None or options.end > last_safe:
            raise OptionError(
                f"option endingOffsets {options.end} lies past the last row safe to read"
                f" ({last_safe or 'none after the start'}): a transaction may still commit"
                " rows below it, which this read would miss; use latest or an earlier offset"
            )
        return options.end
