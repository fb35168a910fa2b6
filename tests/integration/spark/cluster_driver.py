"""The driver the cluster tests submit with spark-submit: the outbox source into a PostgreSQL sink.

Each micro-batch is written in one transaction together with its batch id, and a batch id
already in the sink is skipped (eventsourcing's Tracking: output and progress commit together).
That makes the sink exactly once provided Spark replays a batch with exactly the rows it first
had; the tests then find every committed message in the sink once, whatever was killed.

    spark-submit --master spark://... tests/integration/spark/cluster_driver.py \\
        --publication orders --checkpoint CK --sink-prefix sink_1 [--available-now] ...

The sink's URL comes from OUTBOX_TEST_SINK_URL in the driver's environment only.
"""

import argparse
import contextlib
import io
import json
import os
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import psycopg
from psycopg import sql
from pyspark.sql import DataFrame

from outbox_spark.spark_session import outbox_session
from tests.integration.spark.spark_doubles import HoldingOutboxSource

SINK_URL_VARIABLE = "OUTBOX_TEST_SINK_URL"
PAUSE_SECONDS = 300.0


def argument_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="cluster_driver")
    parser.add_argument("--publication", required=True)
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--sink-prefix", required=True, help="tables PREFIX_messages, _batches")
    parser.add_argument("--option", action="append", default=[], help="KEY=VALUE source option")
    parser.add_argument("--source", default="outbox")
    parser.add_argument("--available-now", action="store_true")
    parser.add_argument("--markers", help="a directory: written-N after batch N's sink commit")
    parser.add_argument("--pause-after-batch", type=int, help="sleep after that batch's commit")
    parser.add_argument("--report", help="write the query plan and Spark UI answers here")
    return parser


def create_sink(conn: psycopg.Connection[object], prefix: str) -> None:
    conn.execute(
        sql.SQL(
            "CREATE TABLE IF NOT EXISTS {} (batch_id bigint PRIMARY KEY);"
            " CREATE TABLE IF NOT EXISTS {} (position bigint NOT NULL, batch_id bigint NOT NULL)"
        ).format(sql.Identifier(f"{prefix}_batches"), sql.Identifier(f"{prefix}_messages"))
    )


def sink_writer(arguments: argparse.Namespace, sink_url: str) -> Callable[[DataFrame, int], None]:
    batches = sql.Identifier(f"{arguments.sink_prefix}_batches")
    messages = sql.Identifier(f"{arguments.sink_prefix}_messages")

    def write(frame: DataFrame, batch_id: int) -> None:
        positions = [row.position for row in frame.select("position").collect()]
        with psycopg.connect(sink_url) as conn:  # one transaction: rows and batch id together
            claimed = conn.execute(
                sql.SQL("INSERT INTO {} VALUES (%s) ON CONFLICT DO NOTHING RETURNING 1").format(
                    batches
                ),
                [batch_id],
            ).fetchone()
            if claimed is not None:  # else a replay of a batch already written
                with conn.cursor() as cursor:
                    cursor.executemany(
                        sql.SQL("INSERT INTO {} VALUES (%s, %s)").format(messages),
                        [(position, batch_id) for position in positions],
                    )
        if arguments.markers:
            (Path(arguments.markers) / f"written-{batch_id}").touch()
        if batch_id == arguments.pause_after_batch:
            time.sleep(PAUSE_SECONDS)  # the sink has the batch, Spark's commit log not yet

    return write


def write_report(path: Path, plan: str, ui_url: str | None, application_id: str) -> None:
    answers = {"plan": plan}
    if ui_url is not None:
        api = f"{ui_url}/api/v1/applications/{application_id}"
        for page in ("environment", "sql?details=true&planDescription=true", "executors"):
            with urllib.request.urlopen(f"{api}/{page}", timeout=30) as response:
                answers[page] = response.read().decode()
    path.write_text(json.dumps(answers))


def main() -> None:
    arguments = argument_parser().parse_args()
    sink_url = os.environ[SINK_URL_VARIABLE]
    with psycopg.connect(sink_url) as conn:
        create_sink(conn, arguments.sink_prefix)
    spark = outbox_session(app_name="outbox-cluster-test")  # the master from spark-submit
    spark.dataSource.register(HoldingOutboxSource)
    options = dict(option.split("=", 1) for option in arguments.option)
    frame = (
        spark.readStream.format(arguments.source)
        .option("publication", arguments.publication)
        .option("subscription", f"cluster-{arguments.sink_prefix}")
        .options(**options)
        .load()
    )
    writer = frame.writeStream.foreachBatch(sink_writer(arguments, sink_url)).option(
        "checkpointLocation", arguments.checkpoint
    )
    if arguments.available_now:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime="200 milliseconds")
    query = writer.start()
    query.awaitTermination()
    if arguments.report:
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            query.explain(extended=True)
        plan = printed.getvalue()
        write_report(
            Path(arguments.report),
            plan,
            spark.sparkContext.uiWebUrl,
            spark.sparkContext.applicationId,
        )
    spark.stop()


if __name__ == "__main__":
    main()
