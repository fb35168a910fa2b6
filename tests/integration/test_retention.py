"""Retention retires a partition only once nothing needs it, and never a message not yet
delivered: checkpoints, Spark queries, consumer positions, parked messages and the minimum age
hold partitions back."""

from typing import Any

import psycopg
import pytest

from poller.daemon.options import DaemonOptions
from poller.retention import retention_pass
from poller.store import retention_store
from tests.support.partitions import (
    billing_over_three_partitions,
    move_checkpoint,
    partition_names,
    positions,
)

SIZE = 100
NO_AGE = DaemonOptions(retention_minimum_age=0.001, partition_size=SIZE, partitions_ahead=2)


@pytest.fixture
def conn(database_url: str) -> Any:
    # Positions 1 to 250 in partitions 0, 100 and 200.
    with billing_over_three_partitions(database_url, SIZE) as connection:
        yield connection


def _retired(conn: psycopg.Connection[Any], options: DaemonOptions = NO_AGE) -> list[str]:
    done = retention_pass(conn, options)
    return [r.partition.name for r in done.retired if r.outcome == "retired"]


def _holder(conn: psycopg.Connection[Any]) -> tuple[str, str | None, str]:
    holder = retention_store.retention_holders(conn)[0]
    return holder.kind, holder.holder, holder.partition


def test_nothing_is_retired_before_every_subscription_passed_it(
    conn: psycopg.Connection[Any],
) -> None:
    assert _retired(conn) == []
    assert _holder(conn) == ("subscription", "billing", "messages_from_0")
    move_checkpoint(conn, "billing", 150)
    assert _retired(conn) == ["messages_from_0"]
    assert positions(conn) == list(range(100, 251))
    assert _holder(conn) == ("subscription", "billing", "messages_from_100")


def test_a_partition_of_one_unpassed_message_is_kept(conn: psycopg.Connection[Any]) -> None:
    move_checkpoint(conn, "billing", 98)  # 99 is still to deliver
    assert _retired(conn) == []
    move_checkpoint(conn, "billing", 99)
    assert _retired(conn) == ["messages_from_0"]


def test_every_subscription_of_the_publication_counts(conn: psycopg.Connection[Any]) -> None:
    conn.execute(
        "INSERT INTO outbox.subscriptions (subscription_id, publication_id, settings)"
        " VALUES ('counts', 'orders', '{\"kind\": \"spark\"}'), ('other', 'invoices', '{}')"
    )
    move_checkpoint(conn, "billing", 250)
    assert _retired(conn) == []
    assert _holder(conn) == ("spark", "counts", "messages_from_0")
    move_checkpoint(conn, "counts", 120)
    assert _retired(conn) == ["messages_from_0"]  # 'other' reads another publication


def test_a_parked_message_keeps_its_partition_but_not_the_next(
    conn: psycopg.Connection[Any],
) -> None:
    conn.execute(
        "INSERT INTO outbox.parked_messages"
        " (subscription_id, position, transaction_id, attempts, last_error)"
        " SELECT 'billing', position, transaction_id, 10, 'boom' FROM outbox.messages"
        " WHERE position = 42"
    )
    move_checkpoint(conn, "billing", 250)
    assert _retired(conn) == ["messages_from_100"]
    assert _holder(conn) == ("parked", "billing", "messages_from_0")
    assert 42 in positions(conn)


def test_consumer_positions_hold_their_messages(conn: psycopg.Connection[Any]) -> None:
    move_checkpoint(conn, "billing", 250)
    conn.execute(
        "INSERT INTO outbox.consumer_positions"
        " SELECT 'audit', transaction_id, position FROM outbox.messages WHERE position = 30"
    )
    assert _retired(conn) == []
    assert _holder(conn) == ("consumer", "audit", "messages_from_0")
    conn.execute(
        "UPDATE outbox.consumer_positions AS c SET position = m.position"
        " FROM outbox.messages AS m WHERE m.position = 199"
    )
    assert _retired(conn) == ["messages_from_0", "messages_from_100"]


def test_the_minimum_age_is_respected(conn: psycopg.Connection[Any]) -> None:
    move_checkpoint(conn, "billing", 250)
    day = DaemonOptions(retention_minimum_age=86400, partition_size=SIZE)
    assert retention_pass(conn, day, dry_run=True).retired == []
    assert _retired(conn, day) == []
    conn.execute(
        "UPDATE outbox.messages SET appended_at = appended_at - interval '2 days'"
        " WHERE position < 100"
    )
    # One young message among old ones keeps the partition: the newest position is not
    # necessarily the newest message (appended_at is the writer transaction's start).
    conn.execute("UPDATE outbox.messages SET appended_at = now() WHERE position = 3")
    assert _retired(conn, day) == []
    conn.execute(
        "UPDATE outbox.messages SET appended_at = appended_at - interval '2 days'"
        " WHERE position = 3"
    )
    assert _retired(conn, day) == ["messages_from_0"]


def test_the_partition_still_being_filled_is_never_retired(conn: psycopg.Connection[Any]) -> None:
    move_checkpoint(conn, "billing", 250)
    assert _retired(conn) == ["messages_from_0", "messages_from_100"]
    assert partition_names(conn)[0] == "messages_from_200"  # takes 250, and 251 next


def test_a_dry_run_changes_nothing(conn: psycopg.Connection[Any]) -> None:
    move_checkpoint(conn, "billing", 250)
    before = partition_names(conn)
    done = retention_pass(conn, NO_AGE, dry_run=True)
    assert [(r.partition.name, r.partition.messages, r.outcome) for r in done.retired] == [
        ("messages_from_0", 99, "would retire"),
        ("messages_from_100", 100, "would retire"),
    ]
    assert partition_names(conn) == before


def test_partitions_are_created_ahead_of_the_next_position(conn: psycopg.Connection[Any]) -> None:
    assert partition_names(conn)[-1] == "messages_from_200"  # made at 1: up to 1 + 2 * 100
    done = retention_pass(conn, NO_AGE)
    assert done.created == ["messages_from_300", "messages_from_400"]  # up to 251 + 2 * 100


def test_retire_refuses_a_table_that_is_not_a_partition(conn: psycopg.Connection[Any]) -> None:
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="not a partition"):
        conn.execute("SELECT outbox.retire_message_partition('subscriptions', '0', '1 s')")
