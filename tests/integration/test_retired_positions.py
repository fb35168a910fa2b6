"""Retention records how far it retired each publication, and nobody resumes below that mark
unnoticed: a catch-up consumer whose position retention did not see (a table of its own, a
position kept client-side), an operator's `subscription create --from` and `seek --to`."""

import logging
from typing import Any

import psycopg
import pytest

import poller
from poller import operations
from poller.catch_up import stream
from poller.daemon.options import DaemonOptions
from poller.retention import retention_pass
from tests.support.cli import outbox_command
from tests.support.partitions import (
    billing_over_three_partitions,
    move_checkpoint,
)

SIZE = 100
NO_AGE = DaemonOptions(retention_minimum_age=0.001, partition_size=SIZE, partitions_ahead=2)


@pytest.fixture
def conn(database_url: str) -> Any:
    # Positions 1 to 250 in partitions 0, 100 and 200.
    with billing_over_three_partitions(database_url, SIZE) as connection:
        yield connection


def at(conn: psycopg.Connection[Any], position: int) -> poller.Checkpoint:
    row = conn.execute(
        "SELECT transaction_id::text::bigint, position FROM outbox.messages WHERE position = %s",
        (position,),
    ).fetchone()
    assert row is not None
    return poller.Checkpoint(*row)


def retire_up_to_150(conn: psycopg.Connection[Any]) -> poller.Checkpoint:
    """Retire the partition of positions 0 to 99 (the subscription moves past it); returns the
    mark: its last message."""
    mark = at(conn, 99)
    move_checkpoint(conn, "billing", 150)
    done = retention_pass(conn, NO_AGE)
    assert [r.partition.name for r in done.retired if r.outcome == "retired"] == ["messages_from_0"]
    return mark


def test_retiring_records_the_last_message_of_the_publication(
    conn: psycopg.Connection[Any],
) -> None:
    mark = retire_up_to_150(conn)
    assert conn.execute(
        "SELECT publication_id, transaction_id::text::bigint, position"
        " FROM outbox.retired_positions"
    ).fetchall() == [("orders", *mark)]


def test_resuming_below_the_mark_is_refused_naming_both_positions(
    conn: psycopg.Connection[Any], database_url: str
) -> None:
    # A consumer keeping its position in a table of its own: retention does not see it.
    resume = at(conn, 5)
    mark = retire_up_to_150(conn)
    items = poller.subscribe_sync(database_url, "orders", start=resume)
    with pytest.raises(poller.RetiredPositionError, match=f"after {resume}.*up to {mark}"):
        next(items)
    items.close()


def test_resuming_at_the_mark_reads_on(conn: psycopg.Connection[Any], database_url: str) -> None:
    mark = retire_up_to_150(conn)
    items = poller.subscribe_sync(database_url, "orders", start=mark)
    first = next(items)
    items.close()
    assert isinstance(first, poller.Message)
    assert first.position == 100


def test_start_begins_after_the_mark_with_a_warning(
    conn: psycopg.Connection[Any], database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    mark = retire_up_to_150(conn)
    items = poller.subscribe_sync(database_url, "orders", start="start")
    with caplog.at_level(logging.WARNING):
        first = next(items)
    items.close()
    assert isinstance(first, poller.Message)
    assert first.position == 100
    assert f"up to {mark} were retired" in caplog.text


def test_a_retirement_while_catching_up_is_reported_at_the_next_read(
    conn: psycopg.Connection[Any], database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(stream, "BATCH_SIZE", 10)
    items = poller.subscribe_sync(database_url, "orders", start=at(conn, 5))
    first = next(items)
    assert isinstance(first, poller.Message)
    assert first.position == 6  # 6 to 15 read; 16 to 99 not yet
    retire_up_to_150(conn)

    def read_on() -> None:
        for _ in range(20):
            next(items)

    with pytest.raises(poller.RetiredPositionError, match=r"after \d+:15 "):
        read_on()
    items.close()


def test_create_and_seek_below_the_mark_are_refused(
    conn: psycopg.Connection[Any], database_url: str
) -> None:
    below = at(conn, 5)
    mark = retire_up_to_150(conn)
    with (
        pytest.raises(operations.SubscriptionError, match=f"up to {mark} were retired"),
        conn.transaction(),
    ):
        operations.create(conn, "late", "orders", str(below), {})
    done = outbox_command(["seek", "billing", "--to", str(below)], database_url)
    assert done.returncode == 1, done
    assert done.stderr.count("\n") == 1, done.stderr  # one line, no traceback
    assert f"--to '{below}': messages of 'orders' up to {mark} were retired" in done.stderr
    assert conn.execute(
        "SELECT subscription_id, last_processed_position FROM outbox.subscriptions"
    ).fetchall() == [("billing", 150)]


def test_start_goes_to_the_mark_and_says_so(
    conn: psycopg.Connection[Any], database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    mark = retire_up_to_150(conn)
    done = outbox_command(["seek", "billing", "--to", "start"], database_url)
    assert done.returncode == 0, done
    assert f"now after {mark}" in done.stdout
    assert f"up to {mark} were retired by retention; starting after them" in done.stderr
    with caplog.at_level(logging.WARNING), conn.transaction():
        assert operations.create(conn, "fresh", "orders", "start", {}) == mark.at
    assert f"up to {mark} were retired" in caplog.text
