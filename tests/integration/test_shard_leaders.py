"""What a shard's leader runs in SQL (poller/store/shard_reads.py): a read of its shard only,
the floor every shard's checkpoint moves, and the end of a change of the shard count, which
waits for every old shard up to the barrier and for every term that may still read past it."""

import asyncio
import random
import time
from typing import Any

import psycopg
import pytest

import outbox
from outbox.positions import Position
from outbox.shards import message_shard
from poller import operations
from poller.daemon.process.shared_connection import SharedConnection
from poller.daemon.process.shared_reads import SharedShardReads
from poller.membership import ShardUnit
from poller.operations import change_shard_count
from poller.reconnect import Reconnector
from poller.store.leader_store import LeaderStore, load_subscription, try_acquire
from poller.store.message_reads import prepare_reader_async, read_batch
from poller.store.records import Lease
from tests.support.inprocess import running_daemon

pytestmark = pytest.mark.asyncio

KEYS = [f"key-{n}" for n in range(40)]


def append_safely(url: str, count: int) -> list[Position]:
    """`count` more messages over KEYS (every tenth keyless); every message of the
    publication, once all are safe to read."""
    with psycopg.connect(url, autocommit=True) as conn:
        total = count + len(read_batch(conn, "orders", Position(0, 0), 100_000))
        for n in range(count):
            key = None if n % 10 == 9 else KEYS[n % len(KEYS)]
            outbox.append(conn, "orders", "T", {"n": n}, partition_key=key)
        # Other tests' transactions on this server hold the safe frontier back a moment.
        deadline = time.monotonic() + 30
        while len(batch := read_batch(conn, "orders", Position(0, 0), 100_000)) < total:
            assert time.monotonic() < deadline, "the messages never became safe to read"
            time.sleep(0.01)
        return [m.at for m in batch]


async def leader(url: str, unit: ShardUnit, holder: str = "") -> LeaderStore:
    holder = holder or f"outbox-poller:shard-{unit.shard_count}-{unit.shard}"
    conn = await psycopg.AsyncConnection.connect(url, autocommit=True, application_name=holder)
    lease = Lease("sub", holder, ttl_seconds=30, unit=unit)
    assert await try_acquire(conn, lease) is not None
    record = await load_subscription(conn, lease)
    assert record is not None
    reads = SharedConnection(
        Reconnector(url, holder, f"{holder} reads", prepare=prepare_reader_async)
    )
    reader = SharedShardReads(reads, asyncio.Event(), "sub")
    return LeaderStore(conn, conn, lease, record.layout, shard_reader=reader)


def stored(url: str, query: str, *parameters: Any) -> list[tuple[Any, ...]]:
    with psycopg.connect(url) as conn:
        return conn.execute(query, parameters).fetchall()


def floor_of(url: str) -> Position:
    [(transaction_id, position)] = stored(
        url,
        "SELECT last_processed_transaction_id::text::bigint, last_processed_position"
        " FROM outbox.subscriptions",
    )
    return Position(transaction_id, position)


async def test_each_shard_reads_its_own_messages_as_the_documented_hash_places_them(
    database_url: str,
) -> None:
    with psycopg.connect(database_url, autocommit=True) as conn:
        operations.create(conn, "sub", "orders", "start", {}, shards=3)
    append_safely(database_url, 200)
    keys = {
        m.at.position: m.partition_key
        for m in read_batch(psycopg.connect(database_url), "orders", Position(0, 0), 1000)
    }
    seen: list[int] = []
    for shard in range(3):
        store = await leader(database_url, ShardUnit(3, shard))
        batch = await store.read_batch("orders", Position(0, 0), 1000)
        assert batch, f"shard {shard} read nothing"
        assert all(message_shard(m.partition_key, m.at.position, 3) == shard for m in batch)
        assert [m.at for m in batch] == sorted(m.at for m in batch)  # delivery order
        seen += [m.at.position for m in batch]
    assert sorted(seen) == sorted(keys)  # every message in exactly one shard


async def test_the_floor_is_the_lowest_shard_checkpoint_however_concurrent_writes_commit(
    database_url: str,
) -> None:
    with psycopg.connect(database_url, autocommit=True) as conn:
        operations.create(conn, "sub", "orders", "start", {}, shards=4)
    positions = append_safely(database_url, 400)
    stores = [await leader(database_url, ShardUnit(4, shard)) for shard in range(4)]
    reached = [0, 0, 0, 0]
    rng = random.Random(7)
    for _ in range(30):
        # Every shard moves a random step at once: the floor statements race each other.
        for shard in range(4):
            reached[shard] = min(len(positions) - 1, reached[shard] + rng.randrange(1, 25))
        await asyncio.gather(
            *(
                store.write_checkpoint(0, positions[reached[shard]], {})
                for shard, store in enumerate(stores)
            )
        )
        assert floor_of(database_url) == positions[min(reached)]


async def test_a_change_ends_only_after_every_old_shard_reached_the_barrier(
    database_url: str,
) -> None:
    with psycopg.connect(database_url, autocommit=True) as conn:
        operations.create(conn, "sub", "orders", "start", {})
    positions = append_safely(database_url, 50)
    unbounded = await leader(database_url, ShardUnit(1, 0), "outbox-poller:before")
    with psycopg.connect(database_url, autocommit=True) as conn:
        change = change_shard_count(conn, "sub", 2)
    assert change.barrier is not None
    assert positions[-1] < change.barrier
    # The term that leads the one old shard began before the change, as a plain one: its
    # checkpoint goes to its shard's row now, where its successor starts.
    assert await unbounded.write_checkpoint(0, positions[10], {})
    new = [await leader(database_url, ShardUnit(2, shard)) for shard in range(2)]
    assert not await new[0].shard_change_drained()
    await unbounded.release()
    assert not await new[0].shard_change_drained()  # the old shard's messages are unfinished
    old = await leader(database_url, ShardUnit(1, 0), "outbox-poller:after")
    [(bounded,)] = stored(
        database_url, "SELECT bounded FROM outbox.subscription_leaders WHERE shard_count = 1"
    )
    assert bounded
    append_safely(database_url, 10)  # after the barrier
    read = await old.read_batch("orders", Position(0, 0), 1000)
    assert [m.at for m in read] == positions  # a draining shard reads up to the barrier only
    assert await old.write_checkpoint(0, positions[-2], {})
    assert not await new[1].shard_change_drained()  # one message of the old shard is left
    assert not await new[1].finish_shard_change()
    assert await old.write_checkpoint(0, positions[-1], {})
    assert await new[1].shard_change_drained()
    assert await new[1].finish_shard_change()
    assert not await new[0].finish_shard_change()  # once
    assert stored(
        database_url,
        "SELECT shard_count, draining_shard_count, shard_barrier_position"
        " FROM outbox.subscriptions",
    ) == [(2, None, None)]
    assert stored(
        database_url, "SELECT shard_count, shard FROM outbox.subscription_shards ORDER BY shard"
    ) == [(2, 0), (2, 1)]
    assert floor_of(database_url) == change.barrier  # where the new shards start
    assert not await old.write_checkpoint(0, positions[-1], {})  # its row is gone
    assert floor_of(database_url) == change.barrier


async def test_a_change_to_one_shard_makes_the_subscription_plain_again(
    database_url: str,
) -> None:
    with psycopg.connect(database_url, autocommit=True) as conn:
        operations.create(conn, "sub", "orders", "start", {}, shards=2)
    positions = append_safely(database_url, 30)
    with psycopg.connect(database_url, autocommit=True) as conn:
        change = change_shard_count(conn, "sub", 1)
    old = [await leader(database_url, ShardUnit(2, shard)) for shard in range(2)]
    single = await leader(database_url, ShardUnit(1, 0))
    for store in old:
        assert await store.write_checkpoint(0, positions[-1], {})
    assert await single.finish_shard_change()
    assert stored(database_url, "SELECT count(*) FROM outbox.subscription_shards") == [(0,)]
    assert floor_of(database_url) == change.barrier  # the one shard's, where it started
    # Plain again: its term runs on, and its store, finding its shard row gone, writes the
    # subscription's own row, and reads as a plain subscription's leader, from then on.
    more = append_safely(database_url, 1)
    assert await single.write_checkpoint(0, more[-1], {})
    assert floor_of(database_url) == more[-1]
    assert [m.at for m in await single.read_batch("orders", more[-2], 10)] == [more[-1]]
    assert single.last_safe is None


async def test_a_shard_without_messages_does_not_hold_the_floor_back(database_url: str) -> None:
    """Retention holds at the floor: a shard none of whose keys is written to must still move
    its checkpoint, past the other shards' messages."""
    settings = {"checkpoint_after": 0.05, "min_checkpoint_count": 1}
    with psycopg.connect(database_url, autocommit=True) as conn:
        operations.create(conn, "sub", "orders", "start", settings, shards=8)
        positions = [
            outbox.append(conn, "orders", "T", {}, partition_key="one-key") for _ in range(5)
        ]
    delivered: list[int] = []
    deadline = time.monotonic() + 15
    with running_daemon(database_url, ["sub"], lambda message: delivered.append(message.position)):
        while floor_of(database_url).position != positions[-1]:
            assert time.monotonic() < deadline, f"the floor stayed at {floor_of(database_url)}"
            await asyncio.sleep(0.05)
    assert delivered == positions
    checkpoints = stored(
        database_url, "SELECT DISTINCT last_processed_position FROM outbox.subscription_shards"
    )
    assert checkpoints == [(positions[-1],)]  # every shard, the seven quiet ones too
