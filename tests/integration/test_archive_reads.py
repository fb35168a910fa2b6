"""Catch-up subscriptions read a publication's archive where retention dropped its messages,
then the table: one history, the same Message objects, in the same order."""

from pathlib import Path
from typing import Any

import psycopg
import pytest

import poller
from outbox.positions import Position
from poller.daemon.options import DaemonOptions
from poller.daemon.process.retention import retention_pass
from poller.store.message_reads import read_batch
from tests.support.archives import archive_ranges
from tests.support.partitions import billing_over_three_partitions, move_checkpoint

SIZE = 100
NO_AGE = DaemonOptions(retention_minimum_age=0.001, partition_size=SIZE, partitions_ahead=2)
FIELDS = (
    "position",
    "transaction_id",
    "publication",
    "message_id",
    "message_type",
    "partition_key",
    "data_text",
    "headers_text",
    "appended_at",
    "delivery_attempt",
)


def described(message: poller.Message) -> tuple[Any, ...]:
    return tuple(getattr(message, field) for field in FIELDS)


@pytest.fixture
def conn(database_url: str) -> Any:
    # Positions 1 to 250 in partitions 0, 100 and 200.
    with billing_over_three_partitions(database_url, SIZE) as connection:
        yield connection


def everything(conn: psycopg.Connection[Any]) -> list[poller.Message]:
    return read_batch(conn, "orders", Position(0, 0), 10_000)


def caught_up(url: str, start: Any = "start") -> list[poller.Message]:
    items = poller.subscribe_sync(url, "orders", start=start)
    read = []
    for item in items:
        if isinstance(item, poller.CaughtUp):
            break
        if isinstance(item, poller.Message):
            read.append(item)
    items.close()
    return read


def test_start_reads_the_archive_then_the_table_as_one_history(
    conn: psycopg.Connection[Any], database_url: str, tmp_path: Path
) -> None:
    history = everything(conn)
    archive_ranges(database_url, "orders", tmp_path.as_uri(), rows_per_range=60, rows_per_file=25)
    move_checkpoint(conn, "billing", 150)
    retired = retention_pass(conn, NO_AGE).retired
    assert [r.outcome for r in retired] == ["retired"]

    read = caught_up(database_url)

    assert [described(m) for m in read] == [described(m) for m in history]
