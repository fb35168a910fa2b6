"""The named SQL of sql/spark_queries.sql, in the format of outbox.queries.

Loaded on first use, not at import: Spark imports outbox_spark.source in several short-lived
helper processes (creating the source, planning each read) that never run a query, and
importing the `outbox` package (pydantic and more) costs each of them tenths of a second.
"""

from functools import cache
from typing import LiteralString


@cache
def spark_queries() -> dict[str, LiteralString]:
    from outbox.queries import load_queries

    return load_queries("spark_queries.sql")
