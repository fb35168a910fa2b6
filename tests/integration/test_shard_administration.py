"""The operator's side of shards on a real database: creating a sharded subscription, changing
its shard count (the barrier, the rows, the refusals), seeking and skipping it, and what the
status views and `status` read of its shards. No daemon runs: leases and shard checkpoints
are stored directly where a test needs them."""

import datetime
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

import outbox
from outbox.positions import MAX_PART, START, Position
from outbox.shards import message_shard
from poller import operations
from poller.operations import ShardLeadership, SubscriptionError
from poller.store.shard_store import SHARD_ADMIN_QUERIES
from tests.integration.test_query_plan import plan_nodes

ShardRows = list[tuple[int, int, Position]]


def append(url: str, key: str | None = None) -> Position:
    """One message in its own transaction, and where it is in delivery order."""
    with psycopg.connect(url) as conn:
        position = outbox.append(conn, "orders", "T", {}, partition_key=key)
        row = conn.execute(
            "SELECT transaction_id::text::bigint FROM outbox.messages WHERE position = %s",
            (position,),
        ).fetchone()
    assert row is not None
    return Position(row[0], position)


def shard_rows(conn: psycopg.Connection[Any], name: str) -> ShardRows:
    rows = conn.execute(
        "SELECT shard_count, shard, last_processed_transaction_id::text::bigint,"
        " last_processed_position FROM outbox.subscription_shards"
        " WHERE subscription_id = %s ORDER BY shard_count, shard",
        (name,),
    ).fetchall()
    return [(count, shard, Position(tx, pos)) for count, shard, tx, pos in rows]


def subscription_row(conn: psycopg.Connection[Any], name: str) -> tuple[Any, ...]:
    """Everything a shard change or a seek may touch on the subscription's own row."""
    row = conn.execute(
        "SELECT last_processed_transaction_id::text::bigint, last_processed_position, epoch,"
        " shard_count, draining_shard_count, shard_barrier_transaction_id::text::bigint,"
        " shard_barrier_position, settings FROM outbox.subscriptions WHERE subscription_id = %s",
        (name,),
    ).fetchone()
    assert row is not None
    return tuple(row)


def set_shard_checkpoint(
    conn: psycopg.Connection[Any], name: str, count: int, shard: int, at: Position
) -> None:
    """Where a shard's leader would have written its checkpoint."""
    conn.execute(
        "UPDATE outbox.subscription_shards SET last_processed_transaction_id = %s::text::xid8,"
        " last_processed_position = %s WHERE subscription_id = %s AND shard_count = %s"
        " AND shard = %s",
        (str(at.transaction_id), at.position, name, count, shard),
    )


def lead(conn: psycopg.Connection[Any], name: str, count: int, shard: int, alive: bool) -> None:
    """A lease on one shard, live or run out, as a daemon's acquire_leadership stores it."""
    conn.execute(
        "INSERT INTO outbox.subscription_leaders"
        " (subscription_id, shard_count, shard, token, holder, host, pid, since, expires_at)"
        " VALUES (%s, %s, %s, 1, %s, 'worker-host', 4242, now(),"
        "         clock_timestamp() + CASE WHEN %s THEN interval '1 hour'"
        "                                  ELSE interval '-1 second' END)",
        (name, count, shard, f"holder-{shard}/{count}", alive),
    )


def test_create_with_shards_starts_every_shard_at_the_subscription_start(
    database_url: str,
) -> None:
    first = append(database_url)
    with psycopg.connect(database_url) as conn:
        at = operations.create(conn, "plain", "orders", "start", {})
        sharded_at = operations.create(conn, "sharded", "orders", str(first), {}, shards=4)
        assert (at, sharded_at) == (START, first)
        assert shard_rows(conn, "plain") == []
        assert subscription_row(conn, "plain")[3:5] == (1, None)
        assert shard_rows(conn, "sharded") == [(4, shard, first) for shard in range(4)]
        assert subscription_row(conn, "sharded")[:5] == (*first, 0, 4, None)


@pytest.mark.parametrize("shards", [0, 257, -1])
def test_a_shard_count_out_of_range_is_refused_before_anything_is_written(
    database_url: str, shards: int
) -> None:
    with psycopg.connect(database_url) as conn:
        with pytest.raises(SubscriptionError, match=f"--shards {shards} is not a shard count"):
            operations.create(conn, "sub", "orders", "start", {}, shards=shards)
        assert operations.list_all(conn) == []
        operations.create(conn, "sub", "orders", "start", {})
        with pytest.raises(SubscriptionError, match=f"--shards {shards} is not a shard count"):
            operations.change_shard_count(conn, "sub", shards)
        assert shard_rows(conn, "sub") == []


def test_a_change_puts_the_barrier_after_every_transaction_older_than_it(
    database_url: str,
) -> None:
    """Plain to two shards: the old unit gets a row at the subscription's checkpoint, the new
    shards rows at the barrier, the end of the last transaction older than the change's own.
    A message of an older transaction is before it even when it commits after the change, so
    the old shards deliver it; one written after the change is after it."""
    with psycopg.connect(database_url) as conn:
        operations.create(conn, "sub", "orders", "start", {})
    backlog = [append(database_url, key=f"customer-{n}") for n in range(5)]
    with psycopg.connect(database_url) as holder:
        [(holder_id,)] = holder.execute("SELECT pg_current_xact_id()::text::bigint").fetchall()
        hidden = append(database_url, key="customer-hidden")  # behind the holder's frontier
        with psycopg.connect(database_url) as conn:
            [(own,)] = conn.execute("SELECT pg_current_xact_id()::text::bigint").fetchall()
            change = operations.change_shard_count(conn, "sub", 2)  # a savepoint
            conn.commit()
            barrier = Position(own - 1, MAX_PART)
            assert change == (1, 2, barrier)
            assert backlog[-1] < hidden < barrier
            assert shard_rows(conn, "sub") == [(1, 0, START), (2, 0, barrier), (2, 1, barrier)]
            # The floor stays; the change is stored whole; the epoch does not move.
            assert subscription_row(conn, "sub")[:7] == (*START, 0, 2, 1, *barrier)
            record = operations.get(conn, "sub")
        late = outbox.append(holder, "orders", "T", {}, partition_key="customer-late")
        holder.commit()
    assert Position(holder_id, late) < barrier
    assert append(database_url, key="customer-after") > barrier
    assert (record.layout.shard_count, record.layout.draining_shard_count) == (2, 1)
    assert record.layout.barrier == barrier


def test_the_barrier_is_never_behind_a_shard_checkpoint(database_url: str) -> None:
    """A shard at the frontier (`end`) is past the last message, and the barrier past it: the
    new shards start after what it finished. One further on still (stored by hand: a seek
    refuses positions from the future) is where the barrier goes. From 4 shards to 1, no row
    of one shard is added for the old."""
    backlog = [append(database_url, key=f"customer-{n}") for n in range(4)]
    end = Position(backlog[-1].transaction_id + 1, MAX_PART)
    further = Position(backlog[-1].transaction_id + 1000, 7)
    with psycopg.connect(database_url) as conn:
        operations.create(conn, "sub", "orders", "start", {}, shards=4)
        operations.create(conn, "other", "orders", "start", {}, shards=2)
        set_shard_checkpoint(conn, "sub", 4, 2, end)
        set_shard_checkpoint(conn, "sub", 4, 1, backlog[1])
        set_shard_checkpoint(conn, "other", 2, 1, further)
        conn.commit()
        change = operations.change_shard_count(conn, "sub", 1)
        assert change.barrier is not None
        assert (change.previous, change.shard_count) == (4, 1)
        assert end < change.barrier
        assert shard_rows(conn, "sub") == [
            (1, 0, change.barrier),
            (4, 0, START),
            (4, 1, backlog[1]),
            (4, 2, end),
            (4, 3, START),
        ]
        assert subscription_row(conn, "sub")[3:7] == (1, 4, *change.barrier)
        assert operations.change_shard_count(conn, "other", 3).barrier == further


def test_a_second_change_while_one_drains_is_refused_and_changes_nothing(
    database_url: str,
) -> None:
    append(database_url)
    with psycopg.connect(database_url) as conn:
        operations.create(conn, "sub", "orders", "start", {}, shards=4)
        operations.change_shard_count(conn, "sub", 2)
        conn.commit()
        before = (subscription_row(conn, "sub"), shard_rows(conn, "sub"))
        with pytest.raises(SubscriptionError) as refused:
            operations.change_shard_count(conn, "sub", 8)
        conn.rollback()
        assert (subscription_row(conn, "sub"), shard_rows(conn, "sub")) == before
    message = str(refused.value)
    assert "a change of 'sub' to 2 shards is still draining" in message
    assert "`outbox subscription show sub`" in message


def test_the_same_count_changes_nothing_even_while_draining(database_url: str) -> None:
    with psycopg.connect(database_url) as conn:
        operations.create(conn, "sub", "orders", "start", {}, shards=4)
        before = (subscription_row(conn, "sub"), shard_rows(conn, "sub"))
        assert operations.change_shard_count(conn, "sub", 4) == (4, 4, None)
        assert (subscription_row(conn, "sub"), shard_rows(conn, "sub")) == before
        operations.change_shard_count(conn, "sub", 3)
        draining = (subscription_row(conn, "sub"), shard_rows(conn, "sub"))
        assert operations.change_shard_count(conn, "sub", 3).barrier is None
        assert (subscription_row(conn, "sub"), shard_rows(conn, "sub")) == draining


def test_a_spark_querys_subscription_has_no_shards(database_url: str) -> None:
    with psycopg.connect(database_url) as conn:
        operations.create(conn, "query", "orders", "start", {"kind": "spark"})
        with pytest.raises(SubscriptionError, match="records a spark query's progress"):
            operations.change_shard_count(conn, "query", 2)
        assert shard_rows(conn, "query") == []
        with pytest.raises(SubscriptionError, match="'nope' does not exist"):
            operations.change_shard_count(conn, "nope", 2)


def test_seek_is_refused_while_a_change_drains(database_url: str) -> None:
    append(database_url)
    with psycopg.connect(database_url) as conn:
        operations.create(conn, "sub", "orders", "start", {})
        operations.change_shard_count(conn, "sub", 3)
        conn.commit()
        before = (subscription_row(conn, "sub"), shard_rows(conn, "sub"))
        long_ago = datetime.datetime(2000, 1, 1, tzinfo=datetime.UTC)
        seeks: tuple[Callable[[], object], ...] = (
            lambda: operations.seek(conn, "sub", "end"),
            lambda: operations.seek_to_time(conn, "sub", long_ago),
        )
        for seek in seeks:
            with pytest.raises(SubscriptionError, match="cannot seek 'sub': a change"):
                seek()
            conn.rollback()
        assert (subscription_row(conn, "sub"), shard_rows(conn, "sub")) == before


def test_seek_moves_every_shard_with_the_floor_and_raises_the_epoch(database_url: str) -> None:
    backlog = [append(database_url, key=f"customer-{n}") for n in range(3)]
    with psycopg.connect(database_url) as conn:
        operations.create(conn, "sub", "orders", "start", {}, shards=3)
        set_shard_checkpoint(conn, "sub", 3, 1, backlog[2])
        at, epoch = operations.seek(conn, "sub", str(backlog[0]))
        assert (at, epoch) == (backlog[0], 1)
        assert shard_rows(conn, "sub") == [(3, shard, backlog[0]) for shard in range(3)]
        assert subscription_row(conn, "sub")[:3] == (*backlog[0], 1)
        # A plain subscription has no shard rows, and a seek makes none.
        operations.create(conn, "plain", "orders", "start", {})
        operations.seek(conn, "plain", "end")
        assert shard_rows(conn, "plain") == []


def test_skip_of_a_sharded_subscription_is_stored_for_every_shard_leader(
    database_url: str,
) -> None:
    backlog = [append(database_url, key=f"customer-{n}") for n in range(3)]
    with psycopg.connect(database_url) as conn:
        operations.create(conn, "sub", "orders", "start", {}, shards=2)
        requested = operations.request_skip(conn, "sub", str(backlog[1]))
        assert (requested.requested, requested.pending) == (backlog[1], backlog[1])
        skip = operations.skip_request(conn, "sub")
        assert skip is not None
        assert skip.to == backlog[1]
        assert shard_rows(conn, "sub") == [(2, 0, START), (2, 1, START)]


def test_the_shard_view_counts_each_shards_own_messages(database_url: str) -> None:
    """One row for a plain subscription (shard 0 of 1); per shard for a sharded one, its
    messages after its checkpoint by outbox.message_shard; during a change the draining
    shards count only up to the barrier."""
    keys = [f"customer-{n}" for n in range(12)] + [None, None]
    backlog = [append(database_url, key=key) for key in keys]
    with psycopg.connect(database_url) as conn:
        operations.create(conn, "plain", "orders", "start", {})
        operations.create(conn, "sharded", "orders", "start", {}, shards=3)
        set_shard_checkpoint(conn, "sharded", 3, 0, backlog[5])
        lead(conn, "sharded", 3, 1, alive=True)
        lead(conn, "sharded", 3, 2, alive=False)
        conn.commit()

        (plain,) = operations.shards(conn, "plain")
        assert (plain.unit, plain.draining, plain.checkpoint) == ((1, 0), False, START)
        assert (plain.messages_behind, plain.leader_host, plain.leader_alive) == (14, None, False)

        def behind(count: int, shard: int, after: Position, until: Position) -> int:
            return sum(
                1
                for key, at in zip(keys, backlog, strict=True)
                if after < at <= until and message_shard(key, at.position, count) == shard
            )

        last = backlog[-1]
        shards = operations.shards(conn, "sharded")
        assert [(s.unit, s.checkpoint, s.messages_behind) for s in shards] == [
            ((3, 0), backlog[5], behind(3, 0, backlog[5], last)),
            ((3, 1), START, behind(3, 1, START, last)),
            ((3, 2), START, behind(3, 2, START, last)),
        ]
        assert sum(s.messages_behind for s in shards) > 0
        assert [(s.leader_host, s.leader_pid, s.leader_alive) for s in shards] == [
            (None, None, False),
            ("worker-host", 4242, True),
            ("worker-host", 4242, False),
        ]

        barrier = operations.change_shard_count(conn, "sharded", 2).barrier
        assert barrier is not None
        assert last < barrier
        more = append(database_url, key="customer-0")
        conn.commit()
        draining = operations.shards(conn, "sharded")
        assert [(s.unit, s.draining) for s in draining] == [
            ((3, 0), True),
            ((3, 1), True),
            ((3, 2), True),
            ((2, 0), False),
            ((2, 1), False),
        ]
        # Old shards: up to the barrier only, so the new message is not theirs.
        assert [s.messages_behind for s in draining[:3]] == [s.messages_behind for s in shards]
        assert [s.messages_behind for s in draining[3:]] == [
            int(message_shard("customer-0", more.position, 2) == shard) for shard in range(2)
        ]
        status = conn.execute(
            "SELECT subscription_id, shards, draining_shards FROM outbox.subscription_status"
            " ORDER BY subscription_id"
        ).fetchall()
        assert status == [("plain", 1, None), ("sharded", 2, 3)]


def test_status_counts_the_shards_a_live_process_leads(database_url: str) -> None:
    with psycopg.connect(database_url) as conn:
        operations.create(conn, "plain", "orders", "start", {})
        operations.create(conn, "sharded", "orders", "start", {}, shards=4)
        lead(conn, "plain", 1, 0, alive=True)
        for shard, alive in enumerate([True, True, True, False]):
            lead(conn, "sharded", 4, shard, alive=alive)
        conn.commit()
        assert {row.subscription: row.shards for row in operations.status(conn)} == {
            "plain": ShardLeadership(1, None, 1, 0),
            "sharded": ShardLeadership(4, None, 3, 0),
        }
        operations.change_shard_count(conn, "sharded", 2)
        lead(conn, "sharded", 2, 0, alive=True)
        conn.commit()
        (_, sharded) = operations.status(conn)
        assert sharded.shards == ShardLeadership(2, 4, 1, 3)


def test_counting_the_led_shards_reads_no_message(database_url: str) -> None:
    """`status` counts leases through the shard view (a reader may read it, not the tables),
    whose per-shard backlog count hashes every key after each checkpoint: the planner must
    drop that join, which the count does not name."""
    with psycopg.connect(database_url) as conn:
        operations.create(conn, "sub", "orders", "start", {}, shards=4)
        row = conn.execute(
            "EXPLAIN (FORMAT JSON) " + SHARD_ADMIN_QUERIES["shard_leaders"]
        ).fetchone()
    assert row is not None
    relations = {node.get("Relation Name") for node in plan_nodes(row[0][0]["Plan"])}
    assert "subscription_shards" in relations
    assert not {name for name in relations if name and name.startswith("messages")}
