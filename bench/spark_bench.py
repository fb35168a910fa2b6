"""Spark reading a publication: the outbox source against Spark's own JDBC batch read.

Both read the same columns of the same rows into Spark's noop sink, taking turns round by
round after a warm-up (best of the rounds, and the median of the rounds' own ratios, so a
change of the machine's load between two variants' runs does not make the ratio): on
local[2], then (full runs only) on a standalone cluster of a master and two
one-core workers started on this machine, the executors separate JVMs. The source runs as a
streaming query with Trigger.AvailableNow (its batch-end and split-point queries included) and
as a batch read (`spark.read`, what a backfill runs); JDBC is a batch read split on
`position`, with a fetch size so the driver streams instead of buffering each partition. Row
(e) reads every row with ADBC in one process without Spark: the server's COPY and the Arrow
build. Row (f) is a Python streaming source that reads one row from nowhere: what Spark costs
per query before any source reads. The JDBC row needs the PostgreSQL JDBC driver and a TCP
server: the jar named by OUTBOX_BENCH_JDBC_JAR, else Debian's (`apt-get install
libpostgresql-jdbc-java` puts it at /usr/share/java/postgresql.jar). Without one, the row is
left out with one line saying why and how to get it; nothing is downloaded.
"""

import os
import statistics
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict

from bench.common import Measurement
from outbox.names import DATABASE_URL_VARIABLE
from outbox.positions import START, Position
from poller.daemon.options import DaemonOptions

if TYPE_CHECKING:  # pyspark is imported only when this benchmark runs
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming.readwriter import DataStreamReader

TITLE = "Spark: reading a publication into a noop sink (local[2], standalone cluster)"
DEBIAN_JDBC_JAR = Path("/usr/share/java/postgresql.jar")
JDBC_JAR_VARIABLE = "OUTBOX_BENCH_JDBC_JAR"
PUBLICATION = "spark-bench"
# The source takes the URL (with its password) from the environment of each executor: the
# variable the archive bench sets too, with the same URL. Spark's JVM, started by the first
# bench of a run, gives its Python workers the environment it started with, so a variable
# only a later bench set never reached them (`make bench` failed in the Spark bench).
URL_ENVIRONMENT_VARIABLE = DATABASE_URL_VARIABLE
JDBC_VARIANT = "(a) Spark JDBC batch read"
FLOOR_VARIANT = "(f) a one-row Python streaming source, whole query"
BATCH_VARIANT = "(g) outbox source, batch read, whole query"
SOURCE_VARIANTS = (
    ("(b) outbox source, ADBC binary COPY", {"copyDriver": "adbc"}),
    ("(c) outbox source, psycopg CSV COPY", {"copyDriver": "psycopg"}),
    ("(d) outbox source, partitionBy=key", {"partitionBy": "key"}),
)
PARTITIONS = 2
ROWS_VARIABLE = "OUTBOX_BENCH_SPARK_ROWS"  # 1M by default; 10M shows how the cost grows

# The columns of the source's spark_read_slice query, for JDBC to read the same values.
JDBC_TABLE = sql.SQL(
    "(SELECT position, transaction_id::text::bigint AS transaction_id,"
    " publication_id AS publication, message_id, message_type, partition_key,"
    " data::text AS data, headers::text AS headers, appended_at"
    " FROM outbox.messages WHERE publication_id = {}) AS m"
).format(sql.Literal(PUBLICATION))


def run(database_url: str, quick: bool) -> list[Measurement]:
    rows = 20_000 if quick else int(os.environ.get(ROWS_VARIABLE, "1000000"))
    # Past a few million rows a run is long enough that one (after the warm-up) is telling.
    repeats = 1 if quick or rows > 2_000_000 else 5
    insert_messages(database_url, rows)
    os.environ[URL_ENVIRONMENT_VARIABLE] = database_url  # before Spark copies the environment
    jdbc_url, jar, skip_reason = jdbc_location(database_url)
    if skip_reason is not None:
        print(f"skipping {JDBC_VARIANT}: {skip_reason}")

    from outbox_spark.spark_session import outbox_session

    config = {
        "spark.sql.shuffle.partitions": str(PARTITIONS),
        "spark.ui.showConsoleProgress": "false",
    }
    if jar is not None:
        config["spark.jars"] = str(jar)
    measurements = [read_outside_spark(database_url, rows)]
    measurements += measure(
        outbox_session("local[2]", app_name="outbox-spark-bench", config=config),
        f"{rows:,} messages, local[2]",
        rows,
        repeats,
        jdbc_url,
        skip_reason,
        database_url,
    )
    if not quick:
        measurements += measure_on_a_cluster(
            database_url, rows, repeats, jdbc_url, skip_reason, config
        )
    return measurements


def read_outside_spark(database_url: str, rows: int) -> Measurement:
    """What bounds the source: one process reading every row with ADBC, no Spark at all."""
    from outbox_spark.copy_reader import read_slice
    from outbox_spark.options import CopyDriver
    from outbox_spark.partitions import Slice

    everything = Slice(START, Position(2**62, 2**62))
    started = time.perf_counter()
    read = sum(
        batch.num_rows
        for batch in read_slice(database_url, PUBLICATION, everything, CopyDriver.ADBC, proof=None)
    )
    seconds = time.perf_counter() - started
    return Measurement(
        f"{rows:,} messages, no Spark",
        "(e) ADBC binary COPY into Arrow, one process",
        read / seconds,
        "rows/s",
        note="the server's COPY and the Arrow build alone; no Spark, no Python worker",
    )


def measure_on_a_cluster(
    database_url: str,
    rows: int,
    repeats: int,
    jdbc_url: str | None,
    skip_reason: str | None,
    config: dict[str, str],
) -> list[Measurement]:
    # The cluster helper of the tests: the same small master and workers they run against.
    from outbox_spark.spark_session import outbox_session
    from tests.integration.spark.standalone_cluster import (
        APPLICATION_CONFIG,
        standalone_cluster,
    )

    with tempfile.TemporaryDirectory() as directory, standalone_cluster(Path(directory)) as cluster:
        session = outbox_session(
            cluster.master_url,
            app_name="outbox-spark-bench-cluster",
            config={
                **APPLICATION_CONFIG,
                **config,
                f"spark.executorEnv.{URL_ENVIRONMENT_VARIABLE}": database_url,
                "spark.ui.enabled": "false",
            },
        )
        return measure(
            session,
            f"{rows:,} messages, standalone cluster",
            rows,
            repeats,
            jdbc_url,
            skip_reason,
            database_url,
        )


def measure(
    spark: "SparkSession",
    group: str,
    rows: int,
    repeats: int,
    jdbc_url: str | None,
    skip_reason: str | None,
    database_url: str,
) -> list[Measurement]:
    """Every variant on `spark`, which is stopped afterwards.

    The reads take turns, round by round (JDBC, the batch read, each source variant), so each
    round compares reads made under the same load: on a machine shared with other work the
    load can change between one variant's runs and the next's. Each value is the best of its
    rounds; the note adds the median of the rounds' own ratios to JDBC."""
    spark.sparkContext.setLogLevel("ERROR")
    baseline = JDBC_VARIANT if skip_reason is None else None
    reads: dict[str, Callable[[], float | None]] = {}
    if jdbc_url is not None:
        reads[JDBC_VARIANT] = partial(read_with_jdbc, spark, jdbc_url, database_url)
    reads[BATCH_VARIANT] = partial(read_as_batch, spark)
    for variant, options in SOURCE_VARIANTS:
        reads[variant] = partial(read_with_source, spark, options)
    try:
        floor = floor_of_a_python_stream(spark, group, repeats)
        rounds = take_turns(repeats, reads)
    finally:
        spark.stop()

    def measured(
        variant: str, seconds: list[float], note: str, label: str | None = None
    ) -> Measurement:
        if baseline is not None:
            paired = statistics.median(
                jdbc / own for jdbc, own in zip(rounds[JDBC_VARIANT][0], seconds, strict=True)
            )
            note = f"{note}; round by round {paired:.2f}x"
        return Measurement(
            group, label or variant, rows / min(seconds), "rows/s", baseline, note=note
        )

    measurements: list[Measurement] = []
    if jdbc_url is not None:
        jdbc_seconds = min(rounds[JDBC_VARIANT][0])
        measurements.append(Measurement(group, JDBC_VARIANT, rows / jdbc_seconds, "rows/s"))
    measurements.append(floor)
    note = f"spark.read.format('outbox'), a backfill; numPartitions={PARTITIONS}"
    measurements.append(measured(BATCH_VARIANT, rounds[BATCH_VARIANT][0], note))
    for variant, _ in SOURCE_VARIANTS:
        walls, triggers = rounds[variant]
        outside = min(walls) - min(triggers)
        note = f"numPartitions={PARTITIONS}; {outside:.1f} s outside the read"
        measurements.append(measured(variant, walls, note))
        if variant == SOURCE_VARIANTS[0][0]:
            note = "a running query's rate: start-up and shutdown left out"
            measurements.append(
                measured(variant, triggers, note, "(b') the same, the trigger that read the rows")
            )
    return measurements


def take_turns(
    repeats: int, reads: dict[str, Callable[[], float | None]]
) -> dict[str, tuple[list[float], list[float]]]:
    """After a warm-up of each (JIT, Python workers, the table in shared buffers), `repeats`
    rounds of every read in turn: per read, its wall seconds and the seconds it reported
    itself (its wall seconds when it reports none), one of each per round."""
    for read in reads.values():
        read()
    rounds: dict[str, tuple[list[float], list[float]]] = {name: ([], []) for name in reads}
    for _ in range(repeats):
        for name, read in reads.items():
            started = time.perf_counter()
            value = read()
            wall = time.perf_counter() - started
            rounds[name][0].append(wall)
            rounds[name][1].append(wall if value is None else value)
    return rounds


def floor_of_a_python_stream(spark: "SparkSession", group: str, repeats: int) -> Measurement:
    """What a query of any Python streaming source costs before it reads: one row, no I/O."""
    from bench.spark_floor_source import OneRowSource

    spark.dataSource.register(OneRowSource)
    seconds, _ = best_of(repeats, partial(run_available_now, spark.readStream.format("one-row")))
    return Measurement(
        group,
        FLOOR_VARIANT,
        seconds,
        "s",
        note="Spark's own cost per query of a Python source; part of every (b)-(d) row",
        higher_is_better=False,
    )


def insert_messages(database_url: str, rows: int) -> None:
    with psycopg.connect(database_url, autocommit=True) as conn:
        # Partitions for every row, as the daemon's maintenance would have made them by then.
        size = DaemonOptions().partition_size
        conn.execute("SELECT outbox.create_message_partitions(%s, %s)", [size, rows // size + 1])
        conn.execute(
            "INSERT INTO outbox.messages"
            " (publication_id, message_id, message_type, partition_key, data)"
            " SELECT %s, 'message-' || n, 'OrderPlaced', 'customer-' || (n %% 1000),"
            " jsonb_build_object('order_id', n, 'amount', (n %% 997) * 1.25,"
            " 'note', 'a typical short payload')"
            " FROM generate_series(1, %s) AS n",
            [PUBLICATION, rows],
        )
        # Both readers then find the visibility map set and the planner's statistics fresh.
        conn.execute("VACUUM ANALYZE outbox.messages")


def jdbc_location(database_url: str) -> tuple[str | None, Path | None, str | None]:
    """The JDBC URL and the driver's jar, or why the JDBC rows cannot run here."""
    named = os.environ.get(JDBC_JAR_VARIABLE)
    jar = Path(named) if named else DEBIAN_JDBC_JAR
    if not jar.is_file():
        where = f"{JDBC_JAR_VARIABLE}={named}" if named else str(jar)
        return (
            None,
            None,
            f"no PostgreSQL JDBC driver at {where}: apt-get install libpostgresql-jdbc-java,"
            f" or set {JDBC_JAR_VARIABLE} to a postgresql-*.jar",
        )
    parts = conninfo_to_dict(database_url)
    host = str(parts.get("host") or "")
    if not host or host.startswith("/"):
        return None, jar, "the server listens on a Unix socket only; JDBC needs TCP"
    url = f"jdbc:postgresql://{host}:{parts.get('port') or 5432}/{parts['dbname']}"
    return url, jar, None


def jdbc_options(jdbc_url: str, database_url: str) -> dict[str, str]:
    """Where and as whom Spark's JDBC reader connects: the server and user of the URL."""
    parts = conninfo_to_dict(database_url)
    return {
        "url": jdbc_url,
        "driver": "org.postgresql.Driver",
        "user": str(parts.get("user", "")),
        "password": str(parts.get("password", "")),
    }


def jdbc_frame(
    spark: "SparkSession",
    jdbc_url: str,
    database_url: str,
    table: sql.Composable,
    publication: str,
    partitions: int,
) -> "DataFrame":
    """Spark's JDBC read of `table` (a publication's rows), split by position into
    `partitions` as a user would: the baseline of the source and of the archive job."""
    with psycopg.connect(database_url) as conn:
        bounds = conn.execute(
            "SELECT min(position), max(position) FROM outbox.messages WHERE publication_id = %s",
            [publication],
        ).fetchone()
    assert bounds is not None
    return (
        spark.read.format("jdbc")
        .options(**jdbc_options(jdbc_url, database_url))
        .option("dbtable", table.as_string(None))
        .option("partitionColumn", "position")
        .option("lowerBound", str(bounds[0]))
        .option("upperBound", str(bounds[1] + 1))
        .option("numPartitions", str(partitions))
        .option("fetchsize", "10000")
        .load()
    )


def read_with_jdbc(spark: "SparkSession", jdbc_url: str, database_url: str) -> None:
    frame = jdbc_frame(spark, jdbc_url, database_url, JDBC_TABLE, PUBLICATION, PARTITIONS)
    frame.write.format("noop").mode("overwrite").save()


def read_with_source(spark: "SparkSession", options: dict[str, str]) -> float:
    """Run one Trigger.AvailableNow query; the seconds of the triggers that read rows."""
    return run_available_now(
        spark.readStream.format("outbox")
        .option("urlEnv", URL_ENVIRONMENT_VARIABLE)
        .option("publication", PUBLICATION)
        .option("subscription", f"bench-{time.monotonic_ns()}")
        .option("numPartitions", str(PARTITIONS))
        .options(**options)
    )


def read_as_batch(spark: "SparkSession") -> None:
    (
        spark.read.format("outbox")
        .option("urlEnv", URL_ENVIRONMENT_VARIABLE)
        .option("publication", PUBLICATION)
        .option("numPartitions", str(PARTITIONS))
        .load()
        .write.format("noop")
        .mode("overwrite")
        .save()
    )


def run_available_now(reader: "DataStreamReader") -> float:
    """Run a Trigger.AvailableNow query into noop; the seconds of the triggers that read rows."""
    with tempfile.TemporaryDirectory() as checkpoint:
        query = (
            reader.load()
            .writeStream.format("noop")
            .option("checkpointLocation", checkpoint)
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
    milliseconds = sum(
        progress["durationMs"]["triggerExecution"]
        for progress in query.recentProgress
        if progress["numInputRows"]
    )
    return float(milliseconds) / 1000


def best_of(repeats: int, read: Callable[[], float | None]) -> tuple[float, float]:
    """The fastest run's wall seconds, and the smallest value `read` itself reported."""
    read()  # warm-up: JIT, Python workers, the table in shared buffers
    walls, reported = [], []
    for _ in range(repeats):
        started = time.perf_counter()
        value = read()
        walls.append(time.perf_counter() - started)
        reported.append(walls[-1] if value is None else value)
    return min(walls), min(reported)
