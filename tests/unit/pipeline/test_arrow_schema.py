"""The Arrow batches match, to the bit, the schema Spark derives from the declared one."""

import datetime

import pyarrow as pa
import pytest
from pyspark.sql.pandas.types import to_arrow_schema

from pipeline.arrow_schema import ARROW_SCHEMA, COLUMN_NAMES, SPARK_SCHEMA, conform


def test_the_arrow_schema_is_the_one_spark_checks_batches_against() -> None:
    # What pyspark's records_to_arrow_batches compares every yielded batch with.
    assert to_arrow_schema(SPARK_SCHEMA, timezone="UTC").equals(ARROW_SCHEMA)
    assert tuple(SPARK_SCHEMA.fieldNames()) == COLUMN_NAMES


def driver_batch(publication_type: pa.DataType | None = None) -> pa.RecordBatch:
    """A batch as a driver returns it: every column nullable, with driver metadata."""
    appended_at = datetime.datetime(2025, 1, 2, 3, 4, 5, 678901, tzinfo=datetime.UTC)
    columns = [
        pa.array([1], pa.int64()),
        pa.array([740], pa.int64()),
        pa.array(["orders"], publication_type or pa.string()),
        pa.array(["m-1"], pa.string()),
        pa.array(["OrderPlaced"], pa.string()),
        pa.array([None], pa.string()),
        pa.array(['{"amount": 1}'], pa.string()),
        pa.array(["{}"], pa.string()),
        pa.array([appended_at], pa.timestamp("us", tz="UTC")),
    ]
    fields = [
        pa.field(name, column.type, True, metadata={"POSTGRESQL:type": "x"})
        for name, column in zip(COLUMN_NAMES, columns, strict=True)
    ]
    return pa.RecordBatch.from_arrays(columns, schema=pa.schema(fields))


def test_conform_relabels_a_driver_batch_with_the_declared_schema() -> None:
    batch = driver_batch()
    assert not batch.schema.equals(ARROW_SCHEMA)
    conformed = conform(batch)
    assert conformed.schema.equals(ARROW_SCHEMA)
    assert conformed.to_pylist() == batch.to_pylist()


def test_conform_refuses_a_column_of_another_type() -> None:
    with pytest.raises(TypeError, match="publication: large_string"):
        conform(driver_batch(pa.large_string()))
