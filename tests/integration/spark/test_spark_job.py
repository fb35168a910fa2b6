"""The example job, run through `outbox spark run` on the shared local session."""

import datetime
from pathlib import Path

import psycopg
import pytest
from click.testing import CliRunner
from pyspark.sql import SparkSession

from outbox_cli.context import CommandContext
from outbox_cli.settings import CommandLineSettings
from outbox_cli.spark_command import spark as spark_group
from tests.integration.spark.writes import wait_until_quiet

pytestmark = pytest.mark.spark


def at(minute: int, second: int) -> datetime.datetime:
    return datetime.datetime(2025, 3, 1, 10, minute, second, tzinfo=datetime.UTC)


MESSAGES = [
    ("OrderPlaced", '{"amount": 10}', at(0, 5)),
    ("OrderShipped", "{}", at(0, 30)),
    ("OrderPlaced", '{"amount": 5.5}', at(0, 40)),
    ("OrderPlaced", '{"amount": 7}', at(1, 10)),
    # Half an hour later: moves the watermark past the windows above, so they are written.
    ("OrderPlaced", '{"amount": 1}', at(30, 0)),
]


def test_message_type_counts_writes_closed_windows_to_parquet(
    spark: SparkSession, database_url: str, source_url: str, tmp_path: Path
) -> None:
    with psycopg.connect(database_url) as conn:
        for n, (message_type, data, appended_at) in enumerate(MESSAGES):
            conn.execute(
                "INSERT INTO outbox.messages"
                " (publication_id, message_id, message_type, data, appended_at)"
                " VALUES ('orders', %s, %s, %s::jsonb, %s)",
                [f"m-{n}", message_type, data, appended_at],
            )
    wait_until_quiet(database_url)
    output = tmp_path / "counts"
    arguments = [
        *("run", "--master", "local[2]", "message-type-counts"),
        *("--url", source_url, "--publication", "orders", "--subscription", "order-counts"),
        "--available-now",
        *("--output", str(output), "--checkpoint", str(tmp_path / "checkpoint")),
        *("--window", "1 minute", "--watermark", "1 minute"),
    ]
    context = CommandContext(CommandLineSettings(database_url=source_url))

    result = CliRunner().invoke(spark_group, arguments, obj=context, catch_exceptions=False)

    assert result.exit_code == 0, result.output
    # Formatted by Spark in the session's zone (UTC): collect() would use the host's.
    counts = spark.read.parquet(str(output)).selectExpr(
        "date_format(window_start, 'yyyy-MM-dd HH:mm') AS start",
        "date_format(window_end, 'HH:mm') AS end",
        "message_type",
        "messages",
        "amount",
    )
    assert sorted(tuple(row) for row in counts.collect()) == [
        ("2025-03-01 10:00", "10:01", "OrderPlaced", 2, 15.5),
        ("2025-03-01 10:00", "10:01", "OrderShipped", 1, None),
        ("2025-03-01 10:01", "10:02", "OrderPlaced", 1, 7.0),
    ]
