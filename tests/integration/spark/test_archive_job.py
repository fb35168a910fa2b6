"""`outbox spark archive`: every message below the safe frontier archived once, in ranges the
database records, in a lake any Parquet reader understands; a second job refused or waiting;
an archive of another version or place refused."""

import datetime
import logging
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import psycopg
import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession

from outbox.archive.layout import FORMAT_VERSION, VERSION_KEY, ArchiveDefaults
from outbox.names import DATABASE_URL_VARIABLE
from outbox.positions import Position
from outbox_spark.archive_job import ArchiveJob, ArchiveSettings
from outbox_spark.options import DatabaseLocation
from tests.integration.spark.writes import (
    append_committed,
    append_in_transaction,
    wait_until_quiet,
)
from tests.support.archives import archived_files
from tests.support.cli import outbox_command
from tests.support.daemons import wait_until

pytestmark = pytest.mark.spark


def run_job(
    spark: SparkSession,
    url: str,
    uri: str,
    rows_per_range: int = ArchiveDefaults.rows_per_range,
    rows_per_file: int = ArchiveDefaults.rows_per_file,
) -> int:
    """The job as `outbox spark archive` runs it, on the tests' Spark session."""
    archive = ArchiveSettings(
        "orders",
        uri,
        DatabaseLocation(url, DATABASE_URL_VARIABLE),
        rows_per_range=rows_per_range,
        rows_per_file=rows_per_file,
    )
    return ArchiveJob(archive, threading.Event(), lambda: spark).run()


def ranges(conn: psycopg.Connection[Any]) -> list[tuple[Position, Position, int]]:
    rows = conn.execute(
        "SELECT after_transaction_id::text::bigint, after_position,"
        " last_transaction_id::text::bigint, last_position, rows FROM outbox.archived_ranges"
        " WHERE publication_id = 'orders' ORDER BY last_transaction_id, last_position"
    ).fetchall()
    return [(Position(a, b), Position(c, d), n) for a, b, c, d, n in rows]


def lake_rows(spark: SparkSession, directory: Path) -> list[Any]:
    """What a lake reader sees: Spark's own Parquet reader, partitions discovered."""
    return spark.read.parquet(str(directory)).collect()


def test_every_safe_message_is_archived_once_in_contiguous_ranges_a_lake_reader_understands(
    spark: SparkSession, database_url: str, source_url: str, tmp_path: Path
) -> None:
    yesterday = datetime.datetime.now(datetime.UTC) - datetime.timedelta(days=1)
    with psycopg.connect(database_url) as conn:
        # An older message, dated the day before: the archive files it under its own day.
        conn.execute(
            "INSERT INTO outbox.messages (publication_id, message_id, message_type, data,"
            " appended_at) VALUES ('orders', 'old', 'Tested', '{\"n\": -1}', %s)",
            (yesterday,),
        )
    safe = append_committed(database_url, "orders", 40, key="k")
    with psycopg.connect(database_url) as held:
        hidden = append_in_transaction(held, "orders", 3)
        behind = append_committed(database_url, "orders", 5)  # committed, behind the frontier
        wait_until_quiet(database_url, but=held)

        assert (
            run_job(spark, source_url, tmp_path.as_uri(), rows_per_range=15, rows_per_file=6) == 3
        )
        held.commit()

    with psycopg.connect(database_url) as conn:
        first = ranges(conn)
        # Contiguous from the start, and nothing behind the open transaction.
        assert [after for after, _, _ in first] == [Position(0, 0), first[0][1], first[1][1]]
        assert sum(rows for _, _, rows in first) == 41
    lake = lake_rows(spark, tmp_path)
    assert sorted(row.position for row in lake) == sorted([1] + [p.position for p in safe])
    assert {row.publication for row in lake} == {"orders"}
    assert {(row.message_id, str(row.date)) for row in lake if row.message_id == "old"} == {
        ("old", yesterday.date().isoformat())
    }
    assert all(row.date == row.appended_at.date() for row in lake)
    for file in archived_files(tmp_path):
        metadata = pq.read_metadata(file).metadata
        assert metadata[VERSION_KEY.encode()] == str(FORMAT_VERSION).encode()

    wait_until_quiet(database_url)
    assert run_job(spark, source_url, tmp_path.as_uri(), rows_per_range=100) == 1
    assert run_job(spark, source_url, tmp_path.as_uri()) == 0  # nothing new: nothing written
    with psycopg.connect(database_url) as conn:
        assert ranges(conn)[:3] == first
        assert ranges(conn)[3][0] == first[2][1]
    archived = Counter(row.position for row in lake_rows(spark, tmp_path))
    assert archived == Counter([1] + [p.position for p in safe + hidden + behind])
    assert len(archived_files(tmp_path)) == len(_listed_files(database_url))


def _listed_files(database_url: str) -> list[str]:
    with psycopg.connect(database_url) as conn:
        rows = conn.execute(
            "SELECT f ->> 'path' FROM outbox.archived_ranges, jsonb_array_elements(files) AS f"
        ).fetchall()
    return [path for (path,) in rows]


def test_a_second_job_is_refused_in_one_line_before_spark_starts(
    database_url: str, tmp_path: Path
) -> None:
    with psycopg.connect(database_url, autocommit=True, application_name="first-job") as first:
        first.execute("SELECT pg_advisory_lock(hashtextextended('outbox.archive:' || 'orders', 0))")
        done = outbox_command(
            ["spark", "archive", "--publication", "orders", "--to", str(tmp_path)], database_url
        )
    assert done.returncode == 2, done
    assert done.stderr.count("\n") == 1, done.stderr
    assert "another archive job writes the archive of 'orders' now (pid" in done.stderr
    assert "first-job" in done.stderr
    assert "Spark" not in done.stderr  # refused before a JVM started


def test_a_job_told_to_wait_archives_once_the_other_ends(
    spark: SparkSession,
    database_url: str,
    source_url: str,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    append_committed(database_url, "orders", 4)
    wait_until_quiet(database_url)
    settings = ArchiveSettings(
        "orders", tmp_path.as_uri(), DatabaseLocation(source_url, DATABASE_URL_VARIABLE)
    )
    done: list[int] = []
    job = ArchiveJob(settings, threading.Event(), lambda: spark)
    with psycopg.connect(database_url, autocommit=True) as first:
        first.execute("SELECT pg_advisory_lock(hashtextextended('outbox.archive:' || 'orders', 0))")
        waiting = threading.Thread(target=lambda: done.append(job.run(wait=True)))
        with caplog.at_level(logging.WARNING):
            waiting.start()
            wait_until(lambda: "waiting for it" in caplog.text, 60, "the job to say it waits")
        assert not done
        first.execute("SELECT pg_advisory_unlock_all()")
        waiting.join(120)
    assert done == [1]


def test_an_archive_elsewhere_or_of_a_newer_version_is_refused_naming_it(
    database_url: str, tmp_path: Path
) -> None:
    with psycopg.connect(database_url) as conn:
        conn.execute(
            "INSERT INTO outbox.archives (publication_id, uri, format_version,"
            " begins_after_transaction_id, begins_after_position, archived_transaction_id,"
            " archived_position) VALUES ('orders', %s, 1, '0', 0, '0', 0)",
            ((tmp_path / "first").as_uri(),),
        )
    elsewhere = outbox_command(
        ["spark", "archive", "--publication", "orders", "--to", str(tmp_path / "second")],
        database_url,
    )
    assert elsewhere.returncode == 2, elsewhere
    assert f"the archive of 'orders' is at {(tmp_path / 'first').as_uri()}, not" in elsewhere.stderr
    with psycopg.connect(database_url) as conn:
        conn.execute("UPDATE outbox.archives SET format_version = 7")
    newer = outbox_command(
        ["spark", "archive", "--publication", "orders", "--to", str(tmp_path / "first")],
        database_url,
    )
    assert newer.returncode == 2, newer
    assert newer.stderr.count("\n") == 1, newer.stderr
    assert "archive format version 7; this version of outbox-poller reads and writes up to" in (
        newer.stderr
    )
