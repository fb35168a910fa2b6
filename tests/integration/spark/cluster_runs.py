"""Submitting the test driver to the standalone cluster and reading its PostgreSQL sink."""

import subprocess
import time
from collections import Counter
from collections.abc import Callable, Mapping
from pathlib import Path

import psycopg
from psycopg import sql

from tests.integration.spark.cluster_driver import SINK_URL_VARIABLE
from tests.integration.spark.standalone_cluster import PROJECT_ROOT, StandaloneCluster

DRIVER = PROJECT_ROOT / "tests" / "integration" / "spark" / "cluster_driver.py"
DRIVER_TIMEOUT = 240.0


def submit_driver(
    cluster: StandaloneCluster,
    log: Path,
    sink_url: str,
    arguments: list[str],
    config: Mapping[str, str] = {},
    environment: Mapping[str, str] = {},
) -> "subprocess.Popen[bytes]":
    return cluster.submit(
        [str(DRIVER), *arguments],
        log,
        config=config,
        environment={SINK_URL_VARIABLE: sink_url, **environment},
    )


def wait_for_exit(driver: "subprocess.Popen[bytes]", log: Path) -> None:
    try:
        code = driver.wait(DRIVER_TIMEOUT)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"the driver ran past {DRIVER_TIMEOUT} s; see {log}") from None
    assert code == 0, f"the driver exited with {code}:\n{log.read_text()[-4000:]}"


def wait_until(condition: Callable[[], bool], what: str, timeout: float = DRIVER_TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} did not happen in {timeout} s")
        time.sleep(0.2)


def sink_positions(database_url: str, prefix: str) -> Counter[int]:
    with psycopg.connect(database_url) as conn:
        rows = conn.execute(
            sql.SQL("SELECT position FROM {}").format(sql.Identifier(f"{prefix}_messages"))
        ).fetchall()
    return Counter(position for (position,) in rows)
