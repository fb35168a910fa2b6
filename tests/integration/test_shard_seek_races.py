"""A seek of a sharded subscription against its shards' leaders, in the interleavings that lost
messages: a write blocked behind the seek's lock must not land after it, the floor must equal
the lowest shard once the seek is in, retention holds at the lowest shard checkpoint whatever
the floor says, and a leader whose next read starts below the retired mark stops loudly.

Each interleaving is scripted: the seek's transaction stays open until the leader's statement
is seen waiting for a lock (pg_stat_activity), then commits."""

import asyncio
import logging
import time

import psycopg
import pytest

from outbox.positions import START, Position
from poller import operations
from poller.daemon.options import DaemonOptions
from poller.membership import ShardUnit
from poller.message import Message
from poller.retention import retention_pass
from poller.store.leader_store import LeaderStore
from poller.store.retired_positions import RetiredPositionError
from poller.store.shard_reads import SHARD_QUERIES
from tests.integration.test_shard_leaders import append_safely, floor_of, leader, stored
from tests.support.daemons import wait_until
from tests.support.inprocess import running_daemon
from tests.support.partitions import use_small_partitions

SHARDS = 4


def shard_checkpoints(url: str) -> list[Position]:
    rows = stored(
        url,
        "SELECT last_processed_transaction_id::text::bigint, last_processed_position"
        " FROM outbox.subscription_shards ORDER BY shard",
    )
    return [Position(*row) for row in rows]


def wait_until_waiting_for_a_lock(url: str, backend: int) -> None:
    deadline = time.monotonic() + 10
    while not stored(
        url, "SELECT 1 FROM pg_stat_activity WHERE pid = %s AND wait_event_type = 'Lock'", backend
    ):
        assert time.monotonic() < deadline, "the leader's statement never waited for the seek"
        time.sleep(0.01)


def move_shards(url: str, to: Position, shards: range = range(SHARDS)) -> None:
    """Shard checkpoints as their leaders' writes leave them (the floor is not raised)."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "UPDATE outbox.subscription_shards SET last_processed_transaction_id"
            " = %s::text::xid8, last_processed_position = %s WHERE shard = ANY(%s)",
            (str(to.transaction_id), to.position, list(shards)),
        )


async def sharded_leaders(url: str, messages: int) -> tuple[list[Position], list[LeaderStore]]:
    with psycopg.connect(url, autocommit=True) as conn:
        operations.create(conn, "sub", "orders", "start", {}, shards=SHARDS)
    positions = append_safely(url, messages)
    return positions, [await leader(url, ShardUnit(SHARDS, shard)) for shard in range(SHARDS)]


async def backend_of(store: LeaderStore) -> int:
    cursor = await store._conn.execute("SELECT pg_backend_pid()")
    row = await cursor.fetchone()
    assert row is not None
    return int(row[0])


async def test_a_checkpoint_of_the_old_epoch_waiting_behind_a_seek_is_refused_after_it(
    database_url: str,
) -> None:
    positions, stores = await sharded_leaders(database_url, 100)
    backend = await backend_of(stores[0])
    with psycopg.connect(database_url) as seeker:
        operations.seek(seeker, "sub", "start")  # its transaction holds the row until commit
        write = asyncio.create_task(stores[0].write_checkpoint(0, positions[60], {}))
        await asyncio.to_thread(wait_until_waiting_for_a_lock, database_url, backend)
        seeker.commit()
    assert await write is False
    assert shard_checkpoints(database_url) == [START] * SHARDS
    assert floor_of(database_url) == START


async def test_a_floor_read_before_a_seek_is_not_written_after_it(database_url: str) -> None:
    positions, stores = await sharded_leaders(database_url, 100)
    # Every shard's write is in, the floor's statement not yet: it comes while the seek holds
    # the row, with a snapshot from before the seek's commit.
    move_shards(database_url, positions[80])
    raiser = stores[0]
    backend = await backend_of(raiser)
    with psycopg.connect(database_url) as seeker:
        operations.seek(seeker, "sub", "start")
        raise_floor = asyncio.create_task(
            raiser._conn.execute(
                SHARD_QUERIES["raise_shard_floor"], {"subscription": "sub", "epoch": 0}
            )
        )
        await asyncio.to_thread(wait_until_waiting_for_a_lock, database_url, backend)
        seeker.commit()
    await raise_floor
    assert shard_checkpoints(database_url) == [START] * SHARDS
    assert floor_of(database_url) == START


def test_retention_holds_at_the_lowest_shard_checkpoint_whatever_the_floor_says(
    database_url: str,
) -> None:
    use_small_partitions(database_url, 100)
    with psycopg.connect(database_url, autocommit=True) as conn:
        operations.create(conn, "sub", "orders", "start", {}, shards=SHARDS)
    positions = append_safely(database_url, 250)
    with psycopg.connect(database_url, autocommit=True) as conn:
        # Three shards past the first two partitions, one still at 39; the floor written as if
        # every shard were past them (what the race above left behind).
        move_shards(database_url, positions[220], range(1, SHARDS))
        low = positions[38]
        move_shards(database_url, low, range(1))
        conn.execute(
            "UPDATE outbox.subscriptions SET last_processed_transaction_id = %s::text::xid8,"
            " last_processed_position = %s",
            (str(positions[220].transaction_id), positions[220].position),
        )
        done = retention_pass(conn, DaemonOptions(retention_minimum_age=0.001, partition_size=100))
        retired = [r.partition.name for r in done.retired if r.outcome == "retired"]
        assert retired == []
        [(kept,)] = conn.execute(
            "SELECT count(*) FROM outbox.messages WHERE position > %s", (low.position,)
        ).fetchall()
        assert kept == 250 - 39


async def test_a_shard_whose_next_read_starts_below_the_retired_mark_fails_loudly(
    database_url: str,
) -> None:
    positions, stores = await sharded_leaders(database_url, 50)
    mark = positions[30]
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO outbox.retired_positions (publication_id, transaction_id, position)"
            " VALUES ('orders', %s::text::xid8, %s)",
            (str(mark.transaction_id), mark.position),
        )
    with pytest.raises(RetiredPositionError, match="would skip messages"):
        await stores[0].read_batch("orders", positions[10], 100)
    # At the mark nothing it still needs was retired.
    assert all(m.at > mark for m in await stores[0].read_batch("orders", mark, 100))


async def test_a_plain_leader_whose_next_read_starts_below_the_retired_mark_fails_loudly(
    database_url: str,
) -> None:
    with psycopg.connect(database_url, autocommit=True) as conn:
        operations.create(conn, "sub", "orders", "start", {})
    positions = append_safely(database_url, 50)
    store = await leader(database_url, ShardUnit(1, 0))
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO outbox.retired_positions (publication_id, transaction_id, position)"
            " VALUES ('orders', %s::text::xid8, %s)",
            (str(positions[30].transaction_id), positions[30].position),
        )
    with pytest.raises(RetiredPositionError, match="would skip messages"):
        await store.read_batch("orders", positions[10], 100)
    assert len(await store.read_batch("orders", positions[30], 100)) == 19


def test_a_daemon_behind_the_retired_mark_delivers_nothing_and_says_so(
    database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    with psycopg.connect(database_url, autocommit=True) as conn:
        operations.create(conn, "sub", "orders", "start", {}, shards=2)
    positions = append_safely(database_url, 40)
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO outbox.retired_positions (publication_id, transaction_id, position)"
            " VALUES ('orders', %s::text::xid8, %s)",
            (str(positions[20].transaction_id), positions[20].position),
        )
    delivered: list[Message] = []
    with caplog.at_level(logging.ERROR), running_daemon(database_url, ["sub"], delivered.append):
        wait_until(
            lambda: sum("stops:" in r.getMessage() for r in caplog.records) == 2,
            30,
            "both shards to stop",
        )
    assert delivered == []
    assert "`outbox seek sub --to" in caplog.text
    assert shard_checkpoints(database_url) == [START, START]
