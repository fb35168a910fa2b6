"""The source on a standalone cluster: executors are separate JVMs and Python workers.

The example job through `outbox spark run --master spark://...`, and a spark-submit'ted query
whose executors get a database URL with a password the two ways users give one on a cluster,
with the password nowhere in the plan, the event log, the Spark UI or any process's log.
"""

import datetime
import json
import subprocess
import sys
import uuid
from collections import Counter
from pathlib import Path

import psycopg
import pyarrow.parquet as pq
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from outbox.names import DATABASE_URL_VARIABLE
from outbox_cli.demo.workload import WorkloadShape, run_writers
from tests.integration.spark.cluster_runs import sink_positions, submit_driver, wait_for_exit
from tests.integration.spark.standalone_cluster import (
    APPLICATION_CONFIG,
    PROJECT_ROOT,
    StandaloneCluster,
    daemon_environment,
    free_port,
)
from tests.integration.spark.writes import wait_until_quiet

pytestmark = [pytest.mark.spark, pytest.mark.spark_cluster, pytest.mark.slow]

SHAPE = WorkloadShape(writers=4, transactions_per_writer=10, max_commit_delay=0.05, seed=14)


def with_password(database_url: str) -> tuple[str, str]:
    """The URL with a password, and the password: the server's own, else a marker one that a
    trust-authenticated server ignores."""
    password = conninfo_to_dict(database_url).get("password") or f"pw-{uuid.uuid4().hex}"
    return make_conninfo(database_url, password=str(password)), str(password)


def files_holding(text: str, *directories: Path) -> list[Path]:
    needle = text.encode()
    return [
        path
        for directory in directories
        for path in directory.rglob("*")
        if path.is_file() and needle in path.read_bytes()
    ]


def test_outbox_spark_run_runs_the_example_job_on_the_cluster(
    spark_cluster: StandaloneCluster, database_url: str, tmp_path: Path
) -> None:
    at = datetime.datetime(2025, 3, 1, 10, 0, 5, tzinfo=datetime.UTC)
    with psycopg.connect(database_url) as conn:
        for n, (message_type, amount, minutes) in enumerate(
            [
                ("OrderPlaced", 10, 0),
                ("OrderShipped", None, 0),
                ("OrderPlaced", 7, 1),
                ("OrderPlaced", 1, 30),  # moves the watermark past the windows above
            ]
        ):
            conn.execute(
                "INSERT INTO outbox.messages"
                " (publication_id, message_id, message_type, data, appended_at)"
                " VALUES ('orders', %s, %s, %s::jsonb, %s)",
                [
                    f"m-{n}",
                    message_type,
                    json.dumps({} if amount is None else {"amount": amount}),
                    at + datetime.timedelta(minutes=minutes),
                ],
            )
    wait_until_quiet(database_url)
    output, log = tmp_path / "counts", tmp_path / "outbox-spark-run.log"
    submit_arguments = " ".join(
        f"--conf {name}={value}" for name, value in APPLICATION_CONFIG.items()
    )
    environment = daemon_environment(
        {
            # No --url: the command hands its database to the executors itself.
            DATABASE_URL_VARIABLE: database_url,
            "PYSPARK_SUBMIT_ARGS": f"{submit_arguments} pyspark-shell",
        }
    )
    with log.open("wb") as output_file:
        done = subprocess.run(
            [
                *(sys.executable, "-m", "outbox_cli", "spark", "run"),
                *("--master", spark_cluster.master_url, "message-type-counts"),
                *("--publication", "orders", "--subscription", "order-counts"),
                *("--available-now", "--output", str(output)),
                *("--checkpoint", str(tmp_path / "checkpoint"), "--watermark", "1 minute"),
            ],
            stdout=output_file,
            stderr=subprocess.STDOUT,
            env=environment,
            cwd=PROJECT_ROOT,
            timeout=240,
            check=False,
        )

    assert done.returncode == 0, log.read_text()[-4000:]
    rows = pq.read_table(output).to_pylist()
    assert sorted(
        (row["window_start"].minute, row["message_type"], row["messages"], row["amount"])
        for row in rows
    ) == [(0, "OrderPlaced", 1, 10.0), (0, "OrderShipped", 1, None), (1, "OrderPlaced", 1, 7.0)]
    # It ran on the cluster: the workers started executors for it.
    assert list(spark_cluster.directory.glob("worker-*/work/app-*/*/stderr"))


@pytest.mark.parametrize("given_as", ["executor-environment", "secret-file"])
def test_executors_get_a_url_with_a_password_that_shows_up_nowhere(
    spark_cluster: StandaloneCluster, database_url: str, tmp_path: Path, given_as: str
) -> None:
    url, password = with_password(database_url)
    tally = run_writers(database_url, "orders", SHAPE)
    wait_until_quiet(database_url)
    events, report, log = tmp_path / "events", tmp_path / "report.json", tmp_path / "driver.log"
    events.mkdir()
    config = {
        "spark.eventLog.enabled": "true",
        "spark.eventLog.dir": events.as_uri(),
        # Spark 4 compresses event logs by default; a grep must read the text.
        "spark.eventLog.compress": "false",
        "spark.ui.enabled": "true",
        "spark.ui.port": str(free_port()),
    }
    environment: dict[str, str] = {}
    if given_as == "executor-environment":
        config[f"spark.executorEnv.{DATABASE_URL_VARIABLE}"] = url
        environment[DATABASE_URL_VARIABLE] = url  # the driver's planner reads it too
        source_options: list[str] = []
    else:
        secret = tmp_path / "database-url"
        secret.write_text(url)
        secret.chmod(0o600)
        source_options = ["--option", f"urlFile={secret}"]
    prefix = f"sink_{uuid.uuid4().hex[:12]}"
    driver = submit_driver(
        spark_cluster,
        log,
        url,
        [
            *("--publication", "orders", "--checkpoint", str(tmp_path / "checkpoint")),
            *("--sink-prefix", prefix, "--available-now", "--report", str(report)),
            *("--option", "numPartitions=2", "--option", "maxRowsPerBatch=100", *source_options),
        ],
        config=config,
        environment=environment,
    )
    wait_for_exit(driver, log)

    assert sink_positions(database_url, prefix) == Counter(tally.committed)
    answers = json.loads(report.read_text())
    assert "outbox" in answers["plan"]
    assert len(json.loads(answers["executors"])) == 3, "not a driver and two executors"
    if given_as == "executor-environment":
        # The setting is there, redacted, in what the UI and the event log show.
        setting = f"spark.executorEnv.{DATABASE_URL_VARIABLE}"
        assert [setting, "*********(redacted)"] in json.loads(answers["environment"])[
            "sparkProperties"
        ]
        assert files_holding(setting, events)
    assert files_holding(password, events, spark_cluster.directory, tmp_path / "checkpoint") == []
    assert password not in log.read_text()
    assert password not in report.read_text()
