"""What operators and their scripts read: `--json` listings, `parked show`, and seeking to a
time or a message id."""

import datetime
import json
from typing import Any

import psycopg
import pytest

import outbox
from outbox.positions import Position
from tests.support.cli import outbox_command, outbox_succeeds
from tests.support.stored import create_subscription, epoch_of, stored_checkpoint


def append(url: str, message_id: str, key: str | None = None) -> Position:
    """One message in its own transaction, and where it is in delivery order."""
    with psycopg.connect(url) as conn:
        position = outbox.append(
            conn,
            "orders",
            "OrderPlaced",
            {"id": message_id, "big": 2**70},
            message_id=message_id,
            partition_key=key,
            headers={"trace": "t-1"},
        )
        row = conn.execute(
            "SELECT transaction_id::text::bigint FROM outbox.messages WHERE position = %s",
            (position,),
        ).fetchone()
    assert row is not None
    return Position(row[0], position)


def park(url: str, subscription: str, at: Position, attempts: int, error: str) -> None:
    with psycopg.connect(url) as conn:
        conn.execute(
            "INSERT INTO outbox.parked_messages"
            " (subscription_id, position, transaction_id, attempts, last_error)"
            " VALUES (%s, %s, %s::text::xid8, %s, %s)",
            (subscription, at.position, str(at.transaction_id), attempts, error),
        )


def json_of(url: str, *arguments: str) -> Any:
    return json.loads(outbox_succeeds(url, *arguments))


def test_parked_list_and_show_give_the_error_attempts_and_whole_message(
    database_url: str,
) -> None:
    create_subscription(database_url, "billing", "orders", max_retry_count=3)
    first = append(database_url, "order-1", key="customer-7")
    second = append(database_url, "order-2")
    park(database_url, "billing", first, 3, "ValueError: no such customer \x1b[31m")
    park(database_url, "billing", second, 5, "TimeoutError")

    listed = json_of(database_url, "parked", "list", "billing", "--json")
    assert [(row["at"], row["attempts"], row["last_error"]) for row in listed] == [
        (str(first), 3, "ValueError: no such customer \x1b[31m"),
        (str(second), 5, "TimeoutError"),
    ]
    assert listed[0]["message_id"] == "order-1"
    datetime.datetime.fromisoformat(listed[0]["parked_at"])

    table = outbox_succeeds(database_url, "parked", "list", "billing")
    assert "no such customer \\x1b[31m" in table  # escaped on a terminal
    assert "\x1b" not in table

    shown = json_of(database_url, "parked", "show", "billing", str(first), "--json")
    assert shown["data"] == {"id": "order-1", "big": 2**70}
    assert (shown["headers"], shown["partition_key"]) == ({"trace": "t-1"}, "customer-7")
    assert (shown["message_type"], shown["transaction_id"]) == ("OrderPlaced", first.transaction_id)
    assert (shown["attempts"], shown["last_error"]) == (3, "ValueError: no such customer \x1b[31m")
    datetime.datetime.fromisoformat(shown["appended_at"])

    by_position = outbox_succeeds(database_url, "parked", "show", "billing", str(second.position))
    for text in ("order-2", "TimeoutError", str(second), '"trace": "t-1"', "appended at"):
        assert text in by_position, by_position


@pytest.mark.parametrize(
    ("position", "code"),
    # Malformed or out of range: a usage error (2); a place with nothing parked: 1.
    [("x1", 2), ("0", 2), ("1:2:3", 2), ("99999999999999999999", 2), ("5", 1)],
)
def test_parked_show_of_no_parked_message_is_one_line_naming_it(
    database_url: str, position: str, code: int
) -> None:
    create_subscription(database_url, "billing", "orders")
    append(database_url, "order-1")  # a message, but not parked
    done = outbox_command(["parked", "show", "billing", position], database_url)
    assert done.returncode == code, done.stdout
    assert repr(position) in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert "Traceback" not in done.stderr


def test_json_of_status_and_subscriptions_has_the_documented_fields(database_url: str) -> None:
    create_subscription(database_url, "billing", "orders", consumers=3)
    append(database_url, "order-1")
    outbox_succeeds(database_url, "skip", "billing", "--to", "end")

    (status,) = json_of(database_url, "status", "--json")
    assert status["subscription"] == "billing"
    assert status["messages_behind"] == 1
    assert status["checkpoint"] == "0:0"
    assert (status["checkpoint_transaction_id"], status["checkpoint_position"]) == (0, 0)
    assert (status["leader_alive"], status["leader_pid"]) == (False, None)
    assert (status["hidden_messages"], status["blockers"]) == (False, [])
    assert (status["shards"], status["shards_led"], status["draining_shards"]) == (1, 0, None)
    assert status["oldest_undelivered_age_seconds"] >= 0

    (listed,) = json_of(database_url, "subscription", "list", "--json")
    assert listed == {
        "subscription": "billing",
        "publication": "orders",
        "checkpoint": "0:0",
        "checkpoint_transaction_id": 0,
        "checkpoint_position": 0,
        "epoch": 0,
        "settings": {"consumers": 3},
        "shards": 1,
        "draining_shards": None,
        "shard_barrier": None,
        "shard_barrier_transaction_id": None,
        "shard_barrier_position": None,
    }
    shown = json_of(database_url, "subscription", "show", "billing", "--json")
    assert shown["effective_settings"]["consumers"] == 3
    assert [
        (s["shard"], s["shard_count"], s["messages_behind"]) for s in shown["shard_status"]
    ] == [(0, 1, 1)]
    assert shown["effective_settings"]["strategy"] == "round-robin"
    assert Position.parse(shown["skip_requested_to"]) > Position(0, 0)
    assert "skip requested to" in outbox_succeeds(database_url, "subscription", "show", "billing")


def test_seek_to_a_time_resumes_with_the_first_message_appended_since(database_url: str) -> None:
    create_subscription(database_url, "billing", "orders")
    append(database_url, "before")
    with psycopg.connect(database_url) as conn:
        since = conn.execute("SELECT clock_timestamp()").fetchone()
    assert since is not None
    first_after = append(database_url, "after-1")
    append(database_url, "after-2")

    outbox_succeeds(database_url, "seek", "billing", "--to-time", since[0].isoformat())
    assert stored_checkpoint(database_url, "billing") == Position(
        first_after.transaction_id, first_after.position - 1
    )
    outbox_succeeds(database_url, "seek", "billing", "--to-message", "after-2")
    after_2 = json_of(database_url, "subscription", "show", "billing", "--json")
    assert after_2["checkpoint_position"] == first_after.position  # right before after-2
    assert epoch_of(database_url, "billing") == 2


@pytest.mark.parametrize(
    ("arguments", "named", "exit_code"),
    [
        (["--to-time", "yesterday"], "yesterday", 2),
        (["--to-time", "2024-05-01T10:00:00"], "2024-05-01T10:00:00", 2),  # no offset
        (["--to-time", "2999-01-01T00:00:00Z"], "2999-01-01T00:00:00+00:00", 1),  # future
        (["--to-message", "no-such-id"], "no-such-id", 1),
        (["--to", "end", "--to-message", "x"], "exactly one", 2),
    ],
)
def test_bad_seek_targets_are_one_line_errors_naming_the_value(
    database_url: str, arguments: list[str], named: str, exit_code: int
) -> None:
    create_subscription(database_url, "billing", "orders")
    done = outbox_command(["seek", "billing", *arguments], database_url)
    assert done.returncode == exit_code, done.stderr
    assert named in done.stderr
    assert "Traceback" not in done.stderr
    assert epoch_of(database_url, "billing") == 0
