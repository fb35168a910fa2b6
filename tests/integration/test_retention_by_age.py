"""Retention for quiet publications: a partition closes by age as well as by size, so
`--retention-minimum-age` bounds how long a delivered message stays whatever the volume. A
thousand messages a day used to fill a partition of 1M positions in three years, and keep
every message that long."""

from typing import Any

import psycopg
import pytest

import outbox
from poller.daemon.options import DaemonOptions
from poller.retention import retention_pass
from poller.store import retention_store
from tests.support.partitions import move_checkpoint, partition_names, positions

DAY = 86400.0
OPTIONS = DaemonOptions(retention_minimum_age=DAY)  # the defaults: 1M positions, 2 ahead


@pytest.fixture
def conn(database_url: str) -> Any:
    """Subscription 'billing' of 'orders', and three messages it has passed, appended two days
    ago: a quiet publication's first partition, far from full."""
    with psycopg.connect(database_url, autocommit=True) as connection:
        connection.execute(
            "INSERT INTO outbox.subscriptions (subscription_id, publication_id)"
            " VALUES ('billing', 'orders')"
        )
        for n in range(3):
            outbox.append(connection, "orders", "T", {"n": n})
        connection.execute("UPDATE outbox.messages SET appended_at = now() - interval '2 days'")
        move_checkpoint(connection, "billing", 3)
        yield connection


def next_position(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute("SELECT outbox.next_message_position()").fetchone()
    assert row is not None
    return int(row[0])


def test_a_quiet_partition_closes_by_age_and_goes_at_the_next_pass(
    conn: psycopg.Connection[Any],
) -> None:
    first = retention_pass(conn, OPTIONS)
    assert first.retired == []  # still filling when the pass began
    assert first.closed.partition == "messages_from_0"
    assert next_position(conn) == 1_000_000
    second = retention_pass(conn, OPTIONS)
    assert [(r.partition.name, r.outcome) for r in second.retired] == [
        ("messages_from_0", "retired")
    ]
    assert positions(conn) == []
    # Two partitions past the next position, as --partitions-ahead says: the made-ahead one
    # the position jumped to, and the next.
    assert partition_names(conn) == ["messages_from_1000000", "messages_from_2000000"]
    assert outbox.append(conn, "orders", "T", {}) == 1_000_000


def test_a_partition_whose_first_message_is_younger_than_the_minimum_age_stays_open(
    conn: psycopg.Connection[Any],
) -> None:
    conn.execute("UPDATE outbox.messages SET appended_at = now() - interval '23 hours'")
    done = retention_pass(conn, OPTIONS)
    assert (done.closed.partition, done.retired) == (None, [])
    assert next_position(conn) == 4


def test_a_message_appended_meanwhile_keeps_the_closed_partition_for_its_own_minimum_age(
    conn: psycopg.Connection[Any],
) -> None:
    late = outbox.append(conn, "orders", "T", {})  # appended now, into the partition to close
    move_checkpoint(conn, "billing", late)
    assert retention_pass(conn, OPTIONS).closed.partition == "messages_from_0"
    assert retention_pass(conn, OPTIONS).retired == []
    held = retention_store.partition_holders(conn, DAY)[0]
    assert (held.partition.name, held.kind) == ("messages_from_0", "minimum age")


def test_closing_waits_for_writers_and_never_moves_the_next_position_back(
    conn: psycopg.Connection[Any], database_url: str
) -> None:
    """The jump takes SHARE on outbox.messages: a writer still in its transaction holds it
    off, and the pass gives up after the lock wait, changing nothing, to try again later."""
    writer = psycopg.connect(database_url)
    try:
        outbox.append(writer, "orders", "T", {})  # position 4, not committed
        options = DaemonOptions(retention_minimum_age=DAY, retention_lock_wait=0.2)
        done = retention_pass(conn, options)
        assert (done.closed.partition, done.closed.busy) == (None, True)
        assert next_position(conn) == 5
        writer.commit()
        assert retention_pass(conn, options).closed.partition == "messages_from_0"
        assert next_position(conn) == 1_000_000
    finally:
        writer.close()
