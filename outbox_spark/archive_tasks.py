"""What one task of the archive job does, on an executor: read its slice of the range from
PostgreSQL and write it as Parquet, one file per UTC day of `appended_at`.

The rows go from COPY into Arrow (outbox_spark/copy_reader.py) and from Arrow into Parquet in
the task's Python worker; the JVM never converts a row. The task returns what it wrote (path,
rows, bytes, SHA-256 and first and last message of each file) to the driver, which records
the range only once every task has. A task Spark runs again writes files of another name
(the attempt is in it), and the range lists those of the attempt Spark kept.
"""

import dataclasses
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark import TaskContext

from outbox.archive.files import ARCHIVE_SCHEMA, DELIVERY_ORDER, encode, store
from outbox.archive.layout import ArchivedFile, file_path
from outbox.positions import Position
from outbox_spark.arrow_schema import ARROW_SCHEMA
from outbox_spark.copy_reader import read_slice
from outbox_spark.options import CopyDriver, DatabaseLocation
from outbox_spark.partitions import Slice


@dataclasses.dataclass(frozen=True)
class SliceWriter:
    """Pickled to every task of a range: where to read from and write to."""

    publication: str
    uri: str
    database: DatabaseLocation
    copy_driver: CopyDriver
    token: str
    """The job's attempt at this range: in every file's name."""

    def __call__(self, task: tuple[int, Slice]) -> list[dict[str, Any]]:
        index, part = task
        context = TaskContext.get()
        attempt = 0 if context is None else context.attemptNumber()
        # Resolved here, on the executor: the URL (and any password) never sits in a plan.
        batches = list(
            read_slice(
                self.database.conninfo(), self.publication, part, self.copy_driver, proof=None
            )
        )
        table = pa.Table.from_batches(batches, schema=ARROW_SCHEMA)
        rows = table.drop_columns(["publication"]).cast(ARCHIVE_SCHEMA).sort_by(DELIVERY_ORDER)
        return [file.to_json() for file in self._write_by_day(rows, index, attempt)]

    def _write_by_day(self, rows: pa.Table, index: int, attempt: int) -> list[ArchivedFile]:
        # The UTC day: appended_at is stored in UTC, and the cast keeps the stored instant's.
        days = pc.cast(rows.column("appended_at"), pa.date32())
        written = []
        for day in pc.unique(days).to_pylist():
            of_day = rows.filter(pc.equal(days, pa.scalar(day, pa.date32())))
            path = file_path(self.publication, day, self.token, index, attempt)
            data = encode(of_day, self.publication)
            digest = store(self.uri, path, data)
            written.append(
                ArchivedFile(
                    path=path,
                    slice=index,
                    rows=of_day.num_rows,
                    bytes=data.size,
                    sha256=digest,
                    first=_position(of_day, 0),
                    last=_position(of_day, of_day.num_rows - 1),
                )
            )
        return written


def _position(rows: pa.Table, index: int) -> Position:
    return Position(
        rows.column("transaction_id")[index].as_py(), rows.column("position")[index].as_py()
    )
