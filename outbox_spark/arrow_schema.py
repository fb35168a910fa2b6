"""The columns of the outbox source, as Spark declares them and as Arrow must deliver them.

Spark compares every Arrow batch a Python source yields with the schema it derives from the
declared one (`to_arrow_schema(schema, timezone="UTC")`) and refuses any difference: a
`large_string`, a timestamp without its UTC zone, or a nullable column declared NOT NULL.
Both schemas are built from one list so they cannot drift.
"""

import pyarrow as pa
from pyspark.sql.types import LongType, StringType, StructField, StructType, TimestampType

# name, Spark type, Arrow type, nullable: the columns a query of the source sees, in order.
_COLUMNS = (
    ("position", LongType(), pa.int64(), False),
    ("transaction_id", LongType(), pa.int64(), False),
    ("publication", StringType(), pa.string(), False),
    ("message_id", StringType(), pa.string(), False),
    ("message_type", StringType(), pa.string(), False),
    ("partition_key", StringType(), pa.string(), True),
    ("data", StringType(), pa.string(), False),
    ("headers", StringType(), pa.string(), False),
    ("appended_at", TimestampType(), pa.timestamp("us", tz="UTC"), False),
)

SPARK_SCHEMA = StructType(
    [StructField(name, spark_type, nullable) for name, spark_type, _, nullable in _COLUMNS]
)
ARROW_SCHEMA = pa.schema(
    [pa.field(name, arrow_type, nullable) for name, _, arrow_type, nullable in _COLUMNS]
)
COLUMN_NAMES = tuple(name for name, *_ in _COLUMNS)
