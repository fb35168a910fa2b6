"""Spark freshness: commit-to-sink latency of a running stream under 16 paced writers.

The writers of bench/load_bench.py commit one message per transaction at 1,000 tx/s in all,
out of order across 16 processes, for 30 s. Two consumers take turns on local[2], each on a
fresh publication:

- the outbox source as a streaming query with the default trigger (a micro-batch as soon as the
  previous one ends) into a foreachBatch sink that records, per message id, when its batch
  reached the sink; it skips a batch id it has seen (exactly once) and counts repeats;
- the baseline: `spark.read.jdbc` every second for the rows past the largest position read so
  far, as a home-made poller would, into the same kind of record. It needs the PostgreSQL JDBC
  driver (bench/spark_bench.py says where it is looked for) and is left out, saying why, without.

A commit's time is when its writer's COMMIT returned and a row's arrival when its batch was in
the sink's hands, both on CLOCK_MONOTONIC (one clock for every process, see load_bench). A
message never recorded is lost: for the JDBC loop, a transaction that committed after a later
position was read (its rows are behind the cursor for good).
"""

import contextlib
import os
import tempfile
import threading
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from psycopg import sql

from bench import load_bench
from bench.common import Measurement, percentiles
from bench.spark_bench import URL_ENVIRONMENT_VARIABLE, jdbc_location, jdbc_options

if TYPE_CHECKING:  # pyspark is imported only when this benchmark runs
    from pyspark.sql import DataFrame, SparkSession

TITLE = "Spark freshness: commit-to-sink latency, 16 writers at 1,000 tx/s, local[2]"
RATE = 1_000.0
SOURCE = "outbox source, default trigger"
JDBC_LOOP = "spark.read.jdbc every 1 s"
JDBC_PERIOD = 1.0

FULL = load_bench.Timing(0.0, {}, sample_every=1.0, drain_timeout=60.0)
FULL_SECONDS = 30.0
QUICK_SECONDS = 2.0


def run(database_url: str, quick: bool) -> list[Measurement]:
    os.environ[URL_ENVIRONMENT_VARIABLE] = database_url  # before Spark copies the environment
    from outbox_spark.spark_session import outbox_session

    jdbc_url, jar, skip_reason = jdbc_location(database_url)
    config = {"spark.ui.showConsoleProgress": "false"}
    if jar is not None:
        config["spark.jars"] = str(jar)
    spark = outbox_session("local[2]", app_name="outbox-spark-freshness", config=config)
    spark.sparkContext.setLogLevel("ERROR")
    seconds = QUICK_SECONDS if quick else FULL_SECONDS
    consumers: dict[str, load_bench.Consumer] = {SOURCE: source_stream(spark)}
    if jdbc_url is not None:
        consumers[JDBC_LOOP] = jdbc_loop(spark, jdbc_url)
    else:
        print(f"skipping {JDBC_LOOP}: {skip_reason}")
    try:
        with load_bench.writer_processes(database_url) as writers:
            runs = {
                variant: load_bench.consume_under_load(
                    database_url,
                    writers,
                    consumer,
                    f"spark-freshness-{index}",
                    RATE,
                    FULL,
                    seconds,
                )
                for index, (variant, consumer) in enumerate(consumers.items())
            }
    finally:
        spark.stop()
    return latency_rows(runs, seconds)


def latency_rows(runs: dict[str, load_bench.Run], seconds: float) -> list[Measurement]:
    group = f"{RATE:,.0f} tx/s for {seconds:g} s"
    baseline = JDBC_LOOP if JDBC_LOOP in runs else None
    measurements = []
    for variant, run_ in runs.items():
        p50, _, p99 = percentiles(run_.latencies)
        note = f"{len(run_.committed):,} committed, {run_.unhandled:,} never arrived"
        aims = (" (aim <= 1 s)", " (aim <= 3 s)") if variant == SOURCE else ("", "")
        for name, value, aim in (("p50", p50, aims[0]), ("p99", p99, aims[1])):
            measurements.append(
                Measurement(
                    f"{group}, {name}",
                    variant,
                    value,
                    "ms",
                    None if variant == baseline else baseline,
                    note + aim,
                    higher_is_better=False,
                )
            )
    return measurements


class ArrivalSink:
    """foreachBatch target: each message's arrival, each batch id once (exactly once)."""

    def __init__(self, handled_at: load_bench.HandledAt) -> None:
        self.handled_at = handled_at
        self.batches: set[int] = set()
        self.repeats = 0

    def __call__(self, frame: "DataFrame", batch_id: int) -> None:
        if batch_id in self.batches:  # a replayed batch: already in the sink
            return
        ids = [row[0] for row in frame.select("message_id").collect()]
        arrived = time.monotonic()
        for message_id in ids:
            if message_id in self.handled_at:
                self.repeats += 1
            else:
                self.handled_at[message_id] = arrived
        self.batches.add(batch_id)


def source_stream(spark: "SparkSession") -> load_bench.Consumer:
    # The source finds the URL in the environment variable set before Spark started.
    @contextlib.contextmanager
    def consumer(_url: str, publication: str, handled_at: load_bench.HandledAt) -> Iterator[None]:
        sink = ArrivalSink(handled_at)
        with tempfile.TemporaryDirectory() as checkpoint:
            query = (
                spark.readStream.format("outbox")
                .option("urlEnv", URL_ENVIRONMENT_VARIABLE)
                .option("publication", publication)
                .option("subscription", publication)
                .load()
                .writeStream.foreachBatch(sink)
                .option("checkpointLocation", checkpoint)
                .start()
            )
            try:
                yield
            finally:
                query.stop()
        if sink.repeats:
            raise RuntimeError(f"{SOURCE}: {sink.repeats} messages reached the sink twice")

    return consumer


def jdbc_loop(spark: "SparkSession", jdbc_url: str) -> load_bench.Consumer:
    @contextlib.contextmanager
    def consumer(url: str, publication: str, handled_at: load_bench.HandledAt) -> Iterator[None]:
        stop = threading.Event()
        failures: list[BaseException] = []

        def poll() -> None:
            after = 0
            try:
                while not stop.is_set():
                    due = time.monotonic() + JDBC_PERIOD
                    after = read_past(spark, jdbc_url, url, publication, after, handled_at)
                    stop.wait(max(0.0, due - time.monotonic()))
            except BaseException as error:  # reported by the consumer, not lost in a thread
                failures.append(error)

        thread = threading.Thread(target=poll, name="jdbc-loop")
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()
        if failures:
            raise RuntimeError(f"{JDBC_LOOP} failed") from failures[0]

    return consumer


def read_past(
    spark: "SparkSession",
    jdbc_url: str,
    database_url: str,
    publication: str,
    after: int,
    handled_at: load_bench.HandledAt,
) -> int:
    """One poll: the rows past `after` by position; returns the largest position read."""
    query = sql.SQL(
        "SELECT message_id, position FROM outbox.messages"
        " WHERE publication_id = {} AND position > {}"
    ).format(sql.Literal(publication), sql.Literal(after))
    options = jdbc_options(jdbc_url, database_url) | {"query": query.as_string(None)}
    rows: list[Any] = spark.read.format("jdbc").options(**options).load().collect()
    arrived = time.monotonic()
    for message_id, position in rows:
        handled_at.setdefault(message_id, arrived)
        after = max(after, position)
    return after
