"""The Arrow batches match, to the bit, the schema Spark derives from the declared one."""

from pyspark.sql.pandas.types import to_arrow_schema

from outbox_spark.arrow_schema import ARROW_SCHEMA, COLUMN_NAMES, SPARK_SCHEMA


def test_the_arrow_schema_is_the_one_spark_checks_batches_against() -> None:
    # What pyspark's records_to_arrow_batches compares every yielded batch with.
    assert to_arrow_schema(SPARK_SCHEMA, timezone="UTC").equals(ARROW_SCHEMA)
    assert tuple(SPARK_SCHEMA.fieldNames()) == COLUMN_NAMES
