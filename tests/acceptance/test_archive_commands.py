"""The operator's commands find archived history: `outbox message show` and `outbox tail
--from start` read messages retention dropped from the table, and `outbox archive delete`
deletes a publication's archive for good."""

from pathlib import Path
from typing import Any

import psycopg
import pytest

from outbox.positions import Position
from poller.daemon.options import DaemonOptions
from poller.retention import retention_pass
from poller.store.message_reads import read_batch
from tests.acceptance.test_tail_command import LineReader, start_plain_tail
from tests.support.archives import archive_ranges, archived_files
from tests.support.cli import outbox_command, outbox_succeeds
from tests.support.partitions import billing_over_three_partitions, move_checkpoint

SIZE = 100
NO_AGE = DaemonOptions(retention_minimum_age=0.001, partition_size=SIZE, partitions_ahead=2)


@pytest.fixture
def retired(database_url: str, tmp_path: Path) -> Any:
    """250 messages archived in ranges of 60, those up to position 199 retired from the table:
    the history as the table had it, in delivery order."""
    with billing_over_three_partitions(database_url, SIZE) as conn:
        history = read_batch(conn, "orders", Position(0, 0), 1000)
        archive_ranges(database_url, "orders", tmp_path.as_uri(), rows_per_range=60)
        move_checkpoint(conn, "billing", 250)
        assert [r.outcome for r in retention_pass(conn, NO_AGE).retired] == ["retired", "retired"]
        assert conn.execute("SELECT min(position) FROM outbox.messages").fetchone() == (200,)
    return history


def test_message_show_finds_a_retired_message_in_the_archive(
    retired: list[Any], database_url: str
) -> None:
    message = retired[41]
    for found_by in (
        ["--id", message.message_id],
        ["--position", str(message.position)],
        ["--position", str(message.at)],
    ):
        shown = outbox_succeeds(database_url, "message", "show", "orders", *found_by)
        assert message.message_id in shown
        assert str(message.at) in shown
        assert message.data_text in shown
    missing = outbox_command(["message", "show", "orders", "--id", "nowhere"], database_url)
    assert missing.returncode == 1
    assert "publication 'orders' has no message id 'nowhere'" in missing.stderr


def test_tail_from_the_start_prints_the_archived_messages_then_the_table_s(
    retired: list[Any], database_url: str
) -> None:
    tail = start_plain_tail(database_url, "--publication", "orders", "--from", "start")
    try:
        lines = LineReader(tail)
        printed = [lines.next() for _ in retired]
        assert [line.split("\t")[0] for line in printed] == [str(m.at) for m in retired]
        assert lines.next() == "[CAUGHT UP]"
    finally:
        tail.kill()
        tail.wait()


def test_archive_delete_removes_the_rows_and_the_files_for_good(
    retired: list[Any], database_url: str, tmp_path: Path
) -> None:
    assert archived_files(tmp_path)
    refused = outbox_command(["archive", "delete", "--publication", "orders"], database_url)
    assert refused.returncode == 2  # no terminal to ask, no --yes
    assert "pass --yes" in refused.stderr
    done = outbox_succeeds(database_url, "archive", "delete", "--publication", "orders", "--yes")
    assert f"deleted the archive of orders at {tmp_path.as_uri()}" in done
    assert archived_files(tmp_path) == []
    with psycopg.connect(database_url) as conn:
        assert conn.execute("SELECT count(*) FROM outbox.archived_ranges").fetchone() == (0,)
    # Without its archive the retired history is gone again, and readers below it are told.
    shown = outbox_command(
        ["message", "show", "orders", "--id", retired[0].message_id], database_url
    )
    assert shown.returncode == 1
    again = outbox_command(["archive", "delete", "--publication", "orders", "--yes"], database_url)
    assert again.returncode == 1
    assert "publication 'orders' has no archive" in again.stderr
