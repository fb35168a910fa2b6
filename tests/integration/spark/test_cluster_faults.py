"""Faults on the standalone cluster; afterwards the sink holds every committed message once.

- A worker dies (SIGKILL to it, its executor JVM and that executor's Python workers) while one
  of its tasks is in the middle of reading a micro-batch: the task runs again elsewhere.
- The driver dies (SIGKILL) after its sink committed a batch and before Spark's commit log
  recorded it, while writers keep committing out of order; a new driver on the same
  checkpoint replays that batch and goes on.
"""

import os
import signal
import threading
import uuid
from collections import Counter
from pathlib import Path

import pytest

from outbox_cli.demo.workload import WorkloadShape, WriterTally, run_writers
from tests.integration.spark.cluster_runs import (
    sink_positions,
    submit_driver,
    wait_for_exit,
    wait_until,
)
from tests.integration.spark.standalone_cluster import StandaloneCluster
from tests.integration.spark.writes import append_committed, wait_until_quiet

pytestmark = [pytest.mark.spark, pytest.mark.spark_cluster, pytest.mark.slow]

SHAPE = WorkloadShape(writers=4, transactions_per_writer=25, max_commit_delay=0.2, seed=41)


def test_a_worker_killed_while_a_batch_reads_loses_and_doubles_nothing(
    spark_cluster: StandaloneCluster, database_url: str, tmp_path: Path
) -> None:
    first = append_committed(database_url, "orders", 300)
    tally = run_writers(database_url, "orders", SHAPE)
    wait_until_quiet(database_url)
    holding, log = tmp_path / "hold", tmp_path / "driver.log"
    holding.mkdir()
    prefix = f"sink_{uuid.uuid4().hex[:12]}"
    driver = submit_driver(
        spark_cluster,
        log,
        database_url,
        [
            *("--publication", "orders", "--checkpoint", str(tmp_path / "checkpoint")),
            *("--sink-prefix", prefix, "--available-now", "--source", "outbox_holding_once"),
            *("--option", f"urlFile={write_url_file(tmp_path, database_url)}"),
            *("--option", "numPartitions=2", "--option", "maxRowsPerBatch=100"),
            # Batch 1 starts at the end of batch 0: its first slice holds mid-read.
            *("--option", f"holdDirectory={holding}", "--option", f"holdAfter={first[99]}"),
        ],
    )
    killed = None
    try:
        marker = holding / "holding"
        wait_until(lambda: marker.exists() and marker.read_text() != "", "a read to hold")
        reader = int(marker.read_text())
        killed = spark_cluster.worker_running(reader)
        spark_cluster.kill_worker(killed, reader)
        wait_until(lambda: not Path(f"/proc/{reader}").exists(), "the reader's end", timeout=30)
        wait_for_exit(driver, log)
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
            driver.wait()
        if killed is not None:
            spark_cluster.start_worker(killed)
            spark_cluster.wait_for_workers(2)

    assert sink_positions(database_url, prefix) == Counter(
        [*(row.position for row in first), *tally.committed]
    )


def test_a_driver_killed_between_sink_and_commit_log_restarts_from_its_checkpoint(
    spark_cluster: StandaloneCluster, database_url: str, tmp_path: Path
) -> None:
    first = append_committed(database_url, "orders", 150)
    wait_until_quiet(database_url)
    markers, checkpoint = tmp_path / "markers", tmp_path / "checkpoint"
    markers.mkdir()
    prefix = f"sink_{uuid.uuid4().hex[:12]}"
    url_file = write_url_file(tmp_path, database_url)
    common = [
        *("--publication", "orders", "--checkpoint", str(checkpoint), "--sink-prefix", prefix),
        *("--option", f"urlFile={url_file}", "--option", "numPartitions=2"),
        *("--option", "maxRowsPerBatch=50", "--markers", str(markers)),
    ]
    tallies: list[WriterTally] = []
    writers = threading.Thread(
        target=lambda: tallies.append(run_writers(database_url, "orders", SHAPE))
    )
    paused_batch = 3
    driver = submit_driver(
        spark_cluster,
        tmp_path / "driver-1.log",
        database_url,
        [*common, "--pause-after-batch", str(paused_batch)],
    )
    try:
        wait_until(lambda: (markers / "written-0").exists(), "the first batch")
        writers.start()  # out-of-order commits while the query runs, is killed and restarts
        wait_until(lambda: (markers / f"written-{paused_batch}").exists(), "the paused batch")
    finally:
        os.killpg(driver.pid, signal.SIGKILL)
        driver.wait()
    # Killed in the window: the sink has the batch, Spark logged its offsets but no commit.
    assert (checkpoint / "offsets" / str(paused_batch)).exists()
    assert not (checkpoint / "commits" / str(paused_batch)).exists()
    writers.join()
    wait_until_quiet(database_url)

    log = tmp_path / "driver-2.log"
    wait_for_exit(
        submit_driver(spark_cluster, log, database_url, [*common, "--available-now"]), log
    )

    assert (checkpoint / "commits" / str(paused_batch)).exists()
    assert sink_positions(database_url, prefix) == Counter(
        [*(row.position for row in first), *tallies[0].committed]
    )


def write_url_file(directory: Path, database_url: str) -> Path:
    """The database URL as a secret file that the driver and every executor read."""
    path = directory / "database-url"
    path.write_text(database_url)
    path.chmod(0o600)
    return path
