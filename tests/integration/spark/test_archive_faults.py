"""The archive job killed while its tasks write, and on a full disk: nothing half-visible, and
the next run archives every message once."""

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path

import psycopg
import pytest
from pyspark.sql import SparkSession

import outbox
from outbox.names import DATABASE_URL_VARIABLE
from outbox_spark.archive_job import ArchiveJob, ArchiveSettings
from outbox_spark.options import DatabaseLocation
from tests.integration.spark.writes import wait_until_quiet
from tests.support.archives import archived_files
from tests.support.cli import outbox_environment
from tests.support.daemons import wait_until
from tests.support.databases import PROJECT_ROOT

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def append(database_url: str, count: int) -> None:
    with psycopg.connect(database_url) as conn:
        outbox.append_many(
            conn,
            "orders",
            [outbox.NewMessage("Tested", {"n": n, "pad": "x" * 40}) for n in range(count)],
        )


def archive_command(uri: str, *more: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "outbox_cli",
        "spark",
        "archive",
        "--publication",
        "orders",
        "--to",
        uri,
        "--master",
        "local[2]",
        *more,
    ]


def session_members(session: int) -> list[int]:
    """The processes of a session (/proc/PID/stat's sixth field): the driver, its JVM, and
    PySpark's worker daemon and workers, which put themselves in a process group of their own
    (pyspark/daemon.py), so killing the driver's group alone leaves them writing."""
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # ended meanwhile
        if int(fields[3]) == session:
            members.append(int(stat.parent.name))
    return members


def kill_session(session: int) -> None:
    """SIGKILL every process of the session at once, then wait until none is left."""
    for pid in session_members(session):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    wait_until(
        lambda: not [p for p in session_members(session) if p != session], 30, "the job's end"
    )


def recorded(database_url: str) -> tuple[int, int, str]:
    """The ranges recorded, their messages, and the archive's mark."""
    with psycopg.connect(database_url) as conn:
        row = conn.execute(
            "SELECT count(g.*), coalesce(sum(g.rows), 0),"
            " (SELECT archived_transaction_id || ':' || archived_position FROM outbox.archives)"
            " FROM outbox.archived_ranges AS g"
        ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1]), str(row[2])


def listed_files(directory: Path, database_url: str) -> list[Path]:
    """The files the catalog lists: the archive, as every reader reads it."""
    with psycopg.connect(database_url) as conn:
        rows = conn.execute(
            "SELECT f ->> 'path' FROM outbox.archived_ranges, jsonb_array_elements(files) AS f"
        ).fetchall()
    return sorted(directory / path for (path,) in rows)


def archived_positions(spark: SparkSession, directory: Path, database_url: str) -> Counter[int]:
    listed = [str(path) for path in listed_files(directory, database_url)]
    return Counter(row.position for row in spark.read.parquet(*listed).collect())


def run_again(spark: SparkSession, url: str, uri: str) -> int:
    settings = ArchiveSettings("orders", uri, DatabaseLocation(url, DATABASE_URL_VARIABLE))
    return ArchiveJob(settings, threading.Event(), lambda: spark).run()


def test_a_job_killed_while_its_tasks_write_leaves_nothing_visible_and_a_rerun_archives_once(
    spark: SparkSession, database_url: str, source_url: str, tmp_path: Path
) -> None:
    append(database_url, 20_000)
    wait_until_quiet(database_url)
    log = tmp_path / "job.log"
    with log.open("wb") as output:
        job = subprocess.Popen(
            # One range of 100 tasks: its row can only commit once every task has written.
            archive_command(tmp_path.as_uri(), "--rows-per-file", "200"),
            env=outbox_environment(database_url),
            cwd=PROJECT_ROOT,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # the driver, its JVM and Python workers: one group
        )
        try:
            wait_until(lambda: archived_files(tmp_path), 120, "the job's first file")
        finally:
            kill_session(job.pid)
            job.wait(30)
    written = archived_files(tmp_path)
    assert written, log.read_text()
    assert recorded(database_url) == (0, 0, "0:0")  # files on disk, none of them archived

    assert run_again(spark, source_url, tmp_path.as_uri()) == 1
    ranges, rows, _ = recorded(database_url)
    assert (ranges, rows) == (1, 20_000)
    assert archived_positions(spark, tmp_path, database_url) == Counter(range(1, 20_001))
    # The killed job's files were swept: on disk is what the catalog lists.
    assert archived_files(tmp_path) == listed_files(tmp_path, database_url)


def test_a_full_disk_fails_the_job_in_one_line_and_records_nothing(
    spark: SparkSession, database_url: str, source_url: str, tmp_path: Path
) -> None:
    if shutil.which("unshare") is None:
        pytest.skip("needs unshare (util-linux) for a disk of its own")
    # Root mounts in a mount namespace of its own; anyone else needs a user namespace too
    # (where root could no longer reach the other users' files: the embedded server's socket).
    unshare = ["unshare", "--mount", *([] if os.geteuid() == 0 else ["--map-root-user"])]
    probe = subprocess.run([*unshare, "true"], capture_output=True, check=False)
    if probe.returncode != 0:
        pytest.skip(f"cannot make a mount namespace here: {probe.stderr.decode().strip()}")
    append(database_url, 5_000)
    wait_until_quiet(database_url)
    lake = tmp_path / "lake"
    lake.mkdir()
    # A 64 KB disk at the archive's path, in a mount namespace of the job's own.
    script = f"mount -t tmpfs -o size=64k tmpfs {lake} && exec " + " ".join(
        f"'{part}'" for part in archive_command(lake.as_uri(), "--rows-per-file", "1000")
    )
    done = subprocess.run(
        [*unshare, "sh", "-c", script],
        env=outbox_environment(database_url),
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    # Spark logs the task's failure as it sees it; the command's own line says what failed.
    (error,) = [line for line in done.stderr.splitlines() if line.startswith("Error:")]
    assert error.startswith("Error: archiving 'orders' (0:0, "), done.stderr
    assert "nothing was recorded" in error
    assert "No space left on device" in error or "errno 28" in error.lower(), error
    assert recorded(database_url) == (0, 0, "0:0")

    # With room, the same archive takes every message once.
    assert run_again(spark, source_url, lake.as_uri()) == 1
    assert archived_positions(spark, lake, database_url) == Counter(range(1, 5_001))
