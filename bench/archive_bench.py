"""The archive: `outbox spark archive` against Spark's plain JDBC read and Parquet write of the
same rows, a catch-up subscription reading them from the archive against reading them from
the table, and the archive's bytes against the table's.

(a)/(b): the whole job (its lock, the catalog, the range's bounds and split points, the Spark
job, the commit) against `spark.read.jdbc(...).write.parquet(...)` of the same columns, split
on `position` into as many tasks as the job's slices, on local[2]; best of a few runs after a
warm-up, taking turns, the archive deleted between runs. (c)/(d): `poller.subscribe_sync`
from the start to CaughtUp, of a publication whose messages are in the table, and of its twin
(the same messages) once the archive holds them and retention has dropped their partitions,
taking turns. (e): the archive's Parquet bytes against the table's
(heap and TOAST; with its indexes beside it). The JDBC row needs Debian's JDBC driver (`make
tools`, or OUTBOX_BENCH_JDBC_JAR), as bench/spark_bench.py does.
"""

import math
import os
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg import sql

from bench.common import Measurement
from bench.spark_bench import jdbc_frame, jdbc_location
from outbox.archive.layout import ArchiveDefaults
from outbox.names import DATABASE_URL_VARIABLE
from poller.daemon.options import DaemonOptions
from poller.retention import retention_pass

if TYPE_CHECKING:  # pyspark is imported only when this benchmark runs
    from pyspark.sql import SparkSession

TITLE = "Archive: writing 1M messages to Parquet, reading them back, and their bytes"
PUBLICATION = "archive-bench"
TABLE_PUBLICATION = "archive-bench-twin"  # the same messages, left in the table
# Partitions of a tenth of the rows: once archived, retention drops all but the last.
PARTITIONS = 10
JOB_VARIANT = "(b) outbox spark archive, whole job"
JDBC_VARIANT = "(a) spark.read.jdbc(...).write.parquet(...)"
TABLE_VARIANT = "(c) subscribe_sync from the start, the table"
ARCHIVE_VARIANT = "(d) subscribe_sync from the start, the archive"
JDBC_TABLE = sql.SQL(
    "(SELECT position, transaction_id::text::bigint AS transaction_id, message_id,"
    " message_type, partition_key, data::text AS data, headers::text AS headers, appended_at"
    " FROM outbox.messages WHERE publication_id = {}) AS m"
).format(sql.Literal(PUBLICATION))


def run(database_url: str, quick: bool) -> list[Measurement]:
    rows = 20_000 if quick else 1_000_000
    repeats = 1 if quick else 3
    partition_size = rows // PARTITIONS
    # The archived publication first, in partitions of its own; the table's after it, held
    # by a subscription, so retention drops the first and keeps the second, and the two reads
    # can take turns (this machine's load changes from minute to minute).
    insert_messages(database_url, rows, partition_size)
    group = f"{rows:,} messages, local[2]"
    lake = Path(tempfile.mkdtemp(prefix="outbox-archive-bench-"))
    jdbc_url, jar, skip_reason = jdbc_location(database_url)
    if skip_reason is not None:
        print(f"skipping {JDBC_VARIANT}: {skip_reason}")
    os.environ[DATABASE_URL_VARIABLE] = database_url  # the job's executors read it
    from outbox_spark.spark_session import outbox_session

    config = {"spark.ui.showConsoleProgress": "false"}
    if jar is not None:
        config["spark.jars"] = str(jar)
    spark = outbox_session("local[2]", app_name="outbox-archive-bench", config=config)
    spark.sparkContext.setLogLevel("WARN")
    tasks = math.ceil(rows / ArchiveDefaults.rows_per_file)
    runs: dict[str, list[float]] = {JDBC_VARIANT: [], JOB_VARIANT: []}
    try:
        for _ in range(repeats + 1):  # the first of each is a warm-up
            if jdbc_url is not None:
                runs[JDBC_VARIANT].append(
                    timed(lambda: write_with_jdbc(spark, jdbc_url, database_url, lake, tasks))
                )
            runs[JOB_VARIANT].append(timed(lambda: archive_anew(spark, database_url, lake)))
    finally:
        spark.stop()
    measurements = []
    if jdbc_url is not None:
        measurements.append(
            Measurement(group, JDBC_VARIANT, rows / min(runs[JDBC_VARIANT][1:]), "rows/s")
        )
    measurements.append(
        Measurement(
            group,
            JOB_VARIANT,
            rows / min(runs[JOB_VARIANT][1:]),
            "rows/s",
            baseline=JDBC_VARIANT if jdbc_url is not None else None,
            note=f"{tasks} tasks, zstd; JDBC writes Spark's default (snappy)",
        )
    )
    measurements += read_back(
        database_url, rows, partition_size, repeats, f"{rows:,} messages, catch-up"
    )
    return measurements


def timed(work: Callable[[], None]) -> float:
    started = time.perf_counter()
    work()
    return time.perf_counter() - started


def insert_messages(database_url: str, rows: int, partition_size: int) -> None:
    with psycopg.connect(database_url, autocommit=True) as conn:
        for (name,) in conn.execute("SELECT partition_name FROM outbox.message_partitions()"):
            conn.execute(sql.SQL("DROP TABLE {}").format(sql.Identifier("outbox", name)))
        conn.execute(
            "SELECT outbox.create_message_partitions(%s, %s)",
            [partition_size, 2 * PARTITIONS + 2],
        )
        for publication in (PUBLICATION, TABLE_PUBLICATION):
            conn.execute(
                "INSERT INTO outbox.messages"
                " (publication_id, message_id, message_type, partition_key, data)"
                " SELECT %s, 'message-' || n, 'OrderPlaced', 'customer-' || (n %% 1000),"
                " jsonb_build_object('order_id', n, 'amount', (n %% 997) * 1.25,"
                " 'note', 'a typical short payload')"
                " FROM generate_series(1, %s) AS n",
                [publication, rows],
            )
        conn.execute(
            "INSERT INTO outbox.subscriptions (subscription_id, publication_id)"
            " VALUES ('archive-bench-keeps-the-table', %s)",
            [TABLE_PUBLICATION],
        )
        conn.execute("VACUUM ANALYZE outbox.messages")


def write_with_jdbc(
    spark: "SparkSession", jdbc_url: str, database_url: str, lake: Path, tasks: int
) -> None:
    frame = jdbc_frame(spark, jdbc_url, database_url, JDBC_TABLE, PUBLICATION, tasks)
    frame.write.mode("overwrite").parquet(str(lake / "jdbc"))


def archive_anew(spark: "SparkSession", database_url: str, lake: Path) -> None:
    """Delete the archive if there is one, then time nothing of that: archive every message."""
    from outbox_spark.archive_job import ArchiveJob, ArchiveSettings
    from outbox_spark.options import DatabaseLocation
    from poller import operations

    with psycopg.connect(database_url, autocommit=True) as conn:
        if operations.archives(conn):
            operations.delete_archive(conn, PUBLICATION)
    settings = ArchiveSettings(
        PUBLICATION, (lake / "outbox").as_uri(), DatabaseLocation(None, DATABASE_URL_VARIABLE)
    )
    ArchiveJob(settings, threading.Event(), lambda: spark).run()


def read_back(
    database_url: str, rows: int, partition_size: int, repeats: int, group: str
) -> list[Measurement]:
    """Catch-up of one publication from the archive (retention dropped its partitions) and
    of the other, its twin, from the table, taking turns."""
    table_bytes, with_indexes = table_size(database_url)
    with psycopg.connect(database_url, autocommit=True) as conn:
        options = DaemonOptions(retention_minimum_age=0.001, partition_size=partition_size)
        retention_pass(conn, options)
        left = conn.execute(
            "SELECT count(*) FROM outbox.messages WHERE publication_id = %s", [PUBLICATION]
        ).fetchone()
        archived = conn.execute("SELECT sum(bytes) FROM outbox.archived_ranges").fetchone()
    assert left is not None
    assert archived is not None
    from_table, from_archive = [], []
    for _ in range(repeats + 1):
        from_table.append(caught_up_per_second(database_url, TABLE_PUBLICATION, rows))
        from_archive.append(caught_up_per_second(database_url, PUBLICATION, rows))
    return [
        Measurement(group, TABLE_VARIANT, max(from_table[1:]), "messages/s"),
        Measurement(
            group,
            ARCHIVE_VARIANT,
            max(from_archive[1:]),
            "messages/s",
            baseline=TABLE_VARIANT,
            note=f"{rows - left[0]:,} of them from the archive",
        ),
        Measurement(
            group, "(e) table, heap and TOAST", table_bytes, "bytes", higher_is_better=False
        ),
        Measurement(
            group,
            "(f) archive, Parquet",
            float(archived[0]),
            "bytes",
            baseline="(e) table, heap and TOAST",
            note=f"the table with its indexes: {with_indexes:,.0f} bytes",
            higher_is_better=False,
        ),
    ]


def table_size(database_url: str) -> tuple[float, float]:
    """The bytes of the table holding the archived publication's rows: half of the whole,
    which holds its twin's as many and alike."""
    with psycopg.connect(database_url) as conn:
        row = conn.execute(
            "SELECT sum(pg_table_size(format('outbox.%I', p.partition_name)::regclass)),"
            " sum(pg_total_relation_size(format('outbox.%I', p.partition_name)::regclass))"
            " FROM outbox.message_partitions() AS p"
        ).fetchone()
    assert row is not None
    return float(row[0]) / 2, float(row[1]) / 2


def caught_up_per_second(database_url: str, publication: str, rows: int) -> float:
    import poller

    started = time.perf_counter()
    read = _read_to_caught_up(poller.subscribe_sync(database_url, publication))
    seconds = time.perf_counter() - started
    assert read == rows, f"read {read} of {rows}"
    return read / seconds


def _read_to_caught_up(items: Any) -> int:
    import poller

    read = 0
    for item in items:
        if isinstance(item, poller.CaughtUp):
            break
        if isinstance(item, poller.Message):
            read += 1
    items.close()
    return read
