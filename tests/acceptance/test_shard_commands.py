"""The shard commands as an operator runs them: `subscription create/update --shards`, and what
`subscription show`, `status`, `seek` and `parked list` say of shards, as text and JSON."""

import json
from typing import Any

import psycopg
import pytest

import outbox
from outbox.positions import Position, readable
from outbox.shards import message_shard
from tests.support.cli import outbox_command, outbox_succeeds

KEYS = [f"customer-{n}" for n in range(6)]


def append_backlog(url: str) -> list[Position]:
    """One message per key, each in its own transaction; where each is in delivery order."""
    at = []
    with psycopg.connect(url) as conn:
        for key in KEYS:
            position = outbox.append(conn, "orders", "T", {}, partition_key=key)
            conn.commit()
            row = conn.execute(
                "SELECT transaction_id::text::bigint FROM outbox.messages WHERE position = %s",
                (position,),
            ).fetchone()
            assert row is not None
            at.append(Position(row[0], position))
    return at


def stored(url: str) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """The subscriptions' rows and every shard row: what a refused command must not change."""
    with psycopg.connect(url) as conn:
        subscriptions = conn.execute(
            "SELECT subscription_id, last_processed_position, epoch, settings, shard_count,"
            " draining_shard_count, shard_barrier_position FROM outbox.subscriptions ORDER BY 1"
        ).fetchall()
        shards = conn.execute(
            "SELECT subscription_id, shard_count, shard, last_processed_position"
            " FROM outbox.subscription_shards ORDER BY 1, 2, 3"
        ).fetchall()
    return subscriptions, shards


def stored_barrier(url: str) -> Position:
    """The barrier of the one subscription's change: the end of the last transaction older
    than the change's own."""
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT shard_barrier_transaction_id::text::bigint, shard_barrier_position"
            " FROM outbox.subscriptions"
        ).fetchone()
    assert row is not None
    return Position(*row)


def json_of(url: str, *arguments: str) -> Any:
    return json.loads(outbox_succeeds(url, *arguments, "--json"))


@pytest.mark.parametrize("value", ["0", "257", "abc"])
def test_a_bad_shard_count_is_one_clean_error_and_writes_nothing(
    database_url: str, value: str
) -> None:
    outbox_succeeds(database_url, "subscription", "create", "billing", "--publication", "orders")
    before = stored(database_url)
    for arguments in (
        ["subscription", "create", "new", "--publication", "orders", "--shards", value],
        ["subscription", "update", "billing", "--shards", value, "--consumers", "2"],
    ):
        done = outbox_command(arguments, database_url)
        assert done.returncode == 2, done.stdout + done.stderr
        assert f"--shards '{value}' is not a shard count from 1 to 256" in done.stderr
        assert "Traceback" not in done.stderr
    assert stored(database_url) == before


def test_create_update_show_and_status_of_a_sharded_subscription(database_url: str) -> None:
    created = outbox_succeeds(
        database_url,
        *("subscription", "create", "billing", "--publication", "orders"),
        *("--from", "start", "--shards", "4"),
    )
    assert created.startswith("created billing on orders (4 shards), starting after 0:0")
    shown = json_of(database_url, "subscription", "show", "billing")
    assert (shown["shards"], shown["draining_shards"], shown["shard_barrier"]) == (4, None, None)
    assert [(s["shard"], s["shard_count"], s["checkpoint"]) for s in shown["shard_status"]] == [
        (shard, 4, "0:0") for shard in range(4)
    ]
    backlog = append_backlog(database_url)

    updated = outbox_succeeds(
        database_url, "subscription", "update", "billing", "--shards", "2", "--consumers", "3"
    )
    at = stored_barrier(database_url)
    assert at > backlog[-1]
    barrier = str(at)
    assert "updated billing: consumers=3" in updated
    assert (
        f"billing: 4 shards -> 2 shards; the 4 old shards deliver up to {readable(at)}" in updated
    )

    shown = json_of(database_url, "subscription", "show", "billing")
    assert (shown["shards"], shown["draining_shards"], shown["shard_barrier"]) == (2, 4, barrier)
    assert shown["settings"] == {"consumers": 3}
    assert [(s["shard_count"], s["draining"], s["checkpoint"]) for s in shown["shard_status"]] == [
        *((4, True, "0:0") for _ in range(4)),
        *((2, False, barrier) for _ in range(2)),
    ]
    assert sum(s["messages_behind"] for s in shown["shard_status"]) == len(KEYS)
    text = outbox_succeeds(database_url, "subscription", "show", "billing")
    for line in ("draining shards", "shard barrier", "0/4 draining", "1/2"):
        assert line in text, text

    (status,) = json_of(database_url, "status")
    assert (status["shards"], status["shards_led"]) == (2, 0)
    assert (status["draining_shards"], status["draining_shards_led"]) == (4, 0)
    assert "0/2 led, draining 0/4 led" in outbox_succeeds(database_url, "status")
    (listed,) = json_of(database_url, "subscription", "list")
    assert (listed["shards"], listed["draining_shards"]) == (2, 4)


def test_a_change_while_one_drains_and_a_seek_then_are_refused(database_url: str) -> None:
    outbox_succeeds(database_url, "subscription", "create", "billing", "--publication", "orders")
    backlog = append_backlog(database_url)
    one = outbox_succeeds(database_url, "subscription", "update", "billing", "--shards", "1")
    assert "billing already has 1 shard; nothing to change" in one
    split = outbox_succeeds(database_url, "subscription", "update", "billing", "--shards", "3")
    at = stored_barrier(database_url)
    assert at > backlog[-1]
    assert f"billing: 1 shard -> 3 shards; the old shard delivers up to {readable(at)}," in split
    before = stored(database_url)
    update = ["subscription", "update", "billing", "--shards", "5", "--consumers", "2"]
    for arguments, refused in (
        (update, "cannot change the shards of 'billing'"),
        (["seek", "billing", "--to", "start"], "cannot seek 'billing'"),
    ):
        done = outbox_command(arguments, database_url)
        assert done.returncode == 1, done.stdout + done.stderr
        assert refused in done.stderr
        assert "a change of 'billing' to 3 shards is still draining" in done.stderr
        assert "`outbox subscription show billing`" in done.stderr
        assert "Traceback" not in done.stderr
    assert stored(database_url) == before
    same = outbox_succeeds(database_url, "subscription", "update", "billing", "--shards", "3")
    assert "billing already has 3 shards; nothing to change" in same
    assert stored(database_url) == before


def test_parked_list_shows_each_messages_shard_under_the_current_count(
    database_url: str,
) -> None:
    outbox_succeeds(
        database_url,
        *("subscription", "create", "billing", "--publication", "orders"),
        *("--from", "start", "--shards", "3"),
    )
    backlog = append_backlog(database_url)
    with psycopg.connect(database_url) as conn:
        for at in backlog:
            conn.execute(
                "INSERT INTO outbox.parked_messages"
                " (subscription_id, position, transaction_id, attempts, last_error)"
                " VALUES ('billing', %s, %s::text::xid8, 1, 'boom')",
                (at.position, str(at.transaction_id)),
            )
    expected = [message_shard(key, at.position, 3) for key, at in zip(KEYS, backlog, strict=True)]
    assert len(set(expected)) > 1  # the keys spread over the shards
    listed = json_of(database_url, "parked", "list", "billing")
    assert [(row["position"], row["shard"]) for row in listed] == [
        (at.position, shard) for at, shard in zip(backlog, expected, strict=True)
    ]
    table = outbox_succeeds(database_url, "parked", "list", "billing")
    assert "shard" in table.splitlines()[1]
