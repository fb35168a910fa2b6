"""Retention waits for the archive: with a publication archived, only what the archive holds
is dropped; `outbox prune --dry-run` and `outbox status` say so, the metrics show the lag, and
a partition whose archive misses a file is kept."""

import asyncio
from pathlib import Path
from typing import Any

import psycopg
import pytest

import poller
from poller import operations
from poller.daemon.options import DaemonOptions
from poller.retention import retention_pass
from tests.integration.test_shard_metrics import scraped
from tests.support.archives import archive_ranges
from tests.support.cli import outbox_succeeds
from tests.support.partitions import billing_over_three_partitions, move_checkpoint

SIZE = 100
NO_AGE = DaemonOptions(retention_minimum_age=0.001, partition_size=SIZE, partitions_ahead=2)
PRUNE = ("--retention-minimum-age", "0.001", "--partition-size", str(SIZE))


@pytest.fixture
def conn(database_url: str) -> Any:
    # Positions 1 to 250 in partitions 0, 100 and 200; 'billing' has read them all.
    with billing_over_three_partitions(database_url, SIZE) as connection:
        move_checkpoint(connection, "billing", 250)
        yield connection


def outcomes(conn: psycopg.Connection[Any]) -> dict[str, str]:
    return {r.partition.name: r.outcome for r in retention_pass(conn, NO_AGE).retired}


def test_retention_drops_only_what_the_archive_holds_and_says_it_waits(
    conn: psycopg.Connection[Any], database_url: str, tmp_path: Path
) -> None:
    archive_ranges(database_url, "orders", tmp_path.as_uri(), rows_per_range=60, ranges=2)

    dry = outbox_succeeds(database_url, "prune", "--dry-run", *PRUNE)
    assert "would retire messages_from_0" in dry
    assert "messages_from_100 (positions 100 to 199, 100 messages): held by the archive of" in dry
    assert "publication orders since" in dry
    assert "waiting for the archive (`outbox spark archive --publication orders`)" in dry

    assert outcomes(conn) == {"messages_from_0": "retired"}  # 100 to 199: 121 on unarchived
    status = outbox_succeeds(database_url, "status")
    assert "archive of orders at " in status
    assert "archived up to " in status
    assert "130 message(s) not archived yet" in status
    assert "messages_from_100 (positions 100 to 199) held by the archive of publication" in status
    assert "waiting for the archive" in status

    archive_ranges(database_url, "orders", tmp_path.as_uri(), rows_per_range=60)
    # All archived: the rest goes (200 to 299 too, closed by age at the first pass).
    assert set(outcomes(conn).values()) == {"retired"}
    assert conn.execute("SELECT count(*) FROM outbox.messages").fetchone() == (0,)


@pytest.mark.usefixtures("conn")
def test_the_metrics_show_how_far_the_archive_is_behind(database_url: str, tmp_path: Path) -> None:
    archive_ranges(database_url, "orders", tmp_path.as_uri(), rows_per_range=100, ranges=1)
    series = asyncio.run(scraped(database_url, ["billing"]))
    labels = (("publication", "orders"),)
    assert series[("outbox_archive_lag_messages", labels)] == 150
    assert series[("outbox_archive_lag_seconds", labels)] > 0
    held = {
        dict(key)["kind"]: dict(key)["holder"]
        for (name, key), _ in series.items()
        if name == "outbox_retention_held_seconds"
    }
    assert held == {"archive": "orders"}
    archive_ranges(database_url, "orders", tmp_path.as_uri(), rows_per_range=1000)
    series = asyncio.run(scraped(database_url, ["billing"]))
    assert series[("outbox_archive_lag_messages", labels)] == 0
    assert series[("outbox_archive_lag_seconds", labels)] == 0


def test_a_partition_whose_archive_misses_a_file_is_kept_naming_the_file(
    conn: psycopg.Connection[Any], database_url: str, tmp_path: Path
) -> None:
    archive_ranges(database_url, "orders", tmp_path.as_uri(), rows_per_range=60)
    row = conn.execute(
        "SELECT files -> 0 ->> 'path' FROM outbox.archived_ranges"
        " ORDER BY last_transaction_id, last_position OFFSET 2 LIMIT 1"
    ).fetchone()
    assert row is not None
    (tmp_path / row[0]).unlink()

    # Lines of 200 columns, the file's name is longer: read it as one line.
    dry = " ".join(outbox_succeeds(database_url, "prune", "--dry-run", *PRUNE).split())
    assert "kept (its messages are in a damaged archive) messages_from_0" in dry
    assert f"archive file {tmp_path.as_uri()}/{row[0]} is missing" in dry
    tried = retention_pass(conn, NO_AGE).retired
    assert [(r.partition.name, r.outcome) for r in tried] == [
        ("messages_from_0", "archive damaged"),
        ("messages_from_100", "archive damaged"),
    ]
    assert all(f"{row[0]} is missing" in str(r.problem) for r in tried)
    assert conn.execute("SELECT count(*) FROM outbox.messages").fetchone() == (250,)


def test_an_archive_begun_after_retention_begins_after_its_retired_mark(
    conn: psycopg.Connection[Any], database_url: str, tmp_path: Path
) -> None:
    assert outcomes(conn) == {"messages_from_0": "retired", "messages_from_100": "retired"}
    mark = conn.execute(
        "SELECT transaction_id::text::bigint, position FROM outbox.retired_positions"
    ).fetchone()
    assert mark is not None
    archive_ranges(database_url, "orders", tmp_path.as_uri(), rows_per_range=1000)
    assert conn.execute(
        "SELECT begins_after_transaction_id::text::bigint, begins_after_position,"
        " (SELECT after_position FROM outbox.archived_ranges) FROM outbox.archives"
    ).fetchone() == (*mark, mark[1])
    below = poller.Checkpoint(mark[0], mark[1] - 1)
    items = poller.subscribe_sync(database_url, "orders", start=below)
    with pytest.raises(poller.RetiredPositionError, match=f"up to {mark[0]}:{mark[1]}"):
        next(items)
    items.close()


def test_subscriptions_start_and_seek_into_archived_history(
    conn: psycopg.Connection[Any], database_url: str, tmp_path: Path
) -> None:
    archive_ranges(database_url, "orders", tmp_path.as_uri(), rows_per_range=1000)
    assert outcomes(conn) == {"messages_from_0": "retired", "messages_from_100": "retired"}
    mark = conn.execute(
        "SELECT transaction_id::text::bigint, position FROM outbox.retired_positions"
    ).fetchone()
    assert mark is not None
    with conn.transaction():
        # `start` is the archive's beginning now, not the retired mark.
        assert operations.create(conn, "from-start", "orders", "start", {}) == (0, 0)
    below = f"{mark[0]}:5"  # a message retired from the table, in the archive
    done = outbox_succeeds(database_url, "seek", "billing", "--to", below)
    assert f"now after {below}" in done
