"""`format("one-row")`: a Python streaming source that reads one row from no database.

What any Python streaming source pays per query before reading a row (Spark starts a Python
process for the driver's reader, plans, writes its logs, stops): the spark bench times a
Trigger.AvailableNow query of it beside the outbox source, so that floor is not mistaken for
the cost of reading.
"""

from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow
from pyspark.sql.types import LongType, StructField, StructType

_ARROW_SCHEMA = pa.schema([pa.field("n", pa.int64(), nullable=False)])


class OneRowSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "one-row"

    def schema(self) -> StructType:
        return StructType([StructField("n", LongType(), nullable=False)])

    def streamReader(self, schema: StructType) -> "OneRowReader":  # noqa: N802, ARG002
        return OneRowReader()


class OneRowReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets 0 (start) and 1 (after the one row); Spark's callback names and signatures,
    whose arguments the one row never needs."""

    def initialOffset(self) -> dict[str, int]:  # noqa: N802
        return {"n": 0}

    def latestOffset(self, start: dict[str, int], limit: object) -> dict[str, int]:  # noqa: N802, ARG002
        return {"n": 1}

    def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802
        pass  # the one row is all there will ever be

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[InputPartition]:
        return [InputPartition(0)] if start["n"] < end["n"] else []

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:  # noqa: ARG002
        yield pa.RecordBatch.from_arrays([pa.array([1], pa.int64())], schema=_ARROW_SCHEMA)

    def commit(self, end: dict[str, int]) -> None:
        pass  # nothing to keep
