"""The read a process shares among the shards it leads (poller/daemon/process/shared_reads.py),
against PostgreSQL: asks that meet are answered by one read, each shard gets exactly its own
messages in delivery order wherever it starts, and a read cut by its row limit still moves
every shard on, so shards far apart all drain without reading anything twice."""

import asyncio
import random
from collections.abc import AsyncIterator, Sequence

import psycopg
import pytest

import outbox
from outbox.positions import START, Position
from outbox.shards import message_shard
from poller import operations
from poller.daemon.process.shared_connection import SharedConnection
from poller.daemon.process.shared_reads import SharedShardReads
from poller.membership import ShardUnit
from poller.message import Message
from poller.reconnect import Reconnector
from poller.store.message_reads import prepare_reader_async, read_batch

pytestmark = pytest.mark.asyncio

KEYS = [f"key-{n}" for n in range(50)]


def append(url: str, count: int, keys: Sequence[str | None] | None = None) -> list[Message]:
    """`count` more messages over `keys` (by default KEYS, every seventh keyless); every
    message of the publication, once all are safe."""
    if keys is None:
        keys = [None if n % 7 == 6 else KEYS[n % len(KEYS)] for n in range(count)]
    with psycopg.connect(url, autocommit=True) as conn:
        total = count + len(read_batch(conn, "orders", START, 100_000))
        for n in range(count):
            outbox.append(conn, "orders", "T", {"n": n}, partition_key=keys[n % len(keys)])
        for _ in range(3000):
            if len(batch := read_batch(conn, "orders", START, 100_000)) == total:
                return batch
            conn.execute("SELECT pg_sleep(0.01)")  # other tests' transactions hold the frontier
    raise AssertionError("the messages never became safe to read")


def create_sharded(url: str, shards: int) -> None:
    """The subscription the reads are for: a shard reads as far as its row lets its count."""
    with psycopg.connect(url, autocommit=True) as conn:
        operations.create(conn, "sub", "orders", "start", {}, shards=shards)


def own(messages: list[Message], unit: ShardUnit) -> list[Position]:
    return [
        m.at
        for m in messages
        if message_shard(m.partition_key, m.at.position, unit.shard_count) == unit.shard
    ]


@pytest.fixture
async def shared(database_url: str) -> AsyncIterator[SharedShardReads]:
    reconnector = Reconnector(
        database_url, "outbox-poller:test", "reads", prepare=prepare_reader_async
    )
    connection = SharedConnection(reconnector)
    reads = SharedShardReads(connection, asyncio.Event(), "sub", most_rows=64)
    try:
        yield reads
    finally:
        await reads.close()
        await connection.close()


async def test_asks_that_meet_are_answered_by_one_read_each_with_its_own_messages(
    database_url: str, shared: SharedShardReads
) -> None:
    create_sharded(database_url, 16)
    messages = append(database_url, 40)
    units = [ShardUnit(16, shard) for shard in range(16)]
    answers = await asyncio.gather(
        *(shared.read("orders", unit, START, 100, None) for unit in units)
    )
    assert shared.reads == 1
    for unit, answer in zip(units, answers, strict=True):
        assert [m.at for m in answer.messages] == own(messages, unit)
        assert not answer.more
        assert answer.last_safe == messages[-1].at


async def test_shards_far_apart_drain_exactly_their_own_messages_through_cut_reads(
    database_url: str, shared: SharedShardReads
) -> None:
    """Random limits and starts, reads cut at 64 rows: every shard reads each of its messages
    once, in order, and the shared reads cost about what one reader of everything would."""
    create_sharded(database_url, 4)
    messages = append(database_url, 600)
    units = [ShardUnit(4, shard) for shard in range(4)]
    rng = random.Random(3)
    # Shard 3 starts halfway: a shard that took over late, far from the others.
    read_to = {unit: START for unit in units}
    read_to[units[3]] = messages[299].at
    got: dict[ShardUnit, list[Position]] = {unit: [] for unit in units}

    async def drain(unit: ShardUnit) -> None:
        while True:
            answer = await shared.read("orders", unit, read_to[unit], rng.randint(1, 40), None)
            got[unit] += [m.at for m in answer.messages]
            if answer.messages:
                read_to[unit] = answer.messages[-1].at
            elif not answer.more:
                return  # a short read that reached the last safe message
            await asyncio.sleep(0)

    await asyncio.gather(*(drain(unit) for unit in units))
    for unit in units:
        start = START if unit.shard != 3 else messages[299].at
        assert got[unit] == [at for at in own(messages, unit) if at > start], unit
    # 600 rows at 64 a read is 10 reads for one reader of them all; shard 3's start costs a
    # few more, and the shards' small asks more still, but not a read per shard per page.
    assert shared.reads <= 60, shared.reads


async def test_a_read_carries_the_shards_that_did_not_ask_and_answers_them_without_a_read(
    database_url: str, shared: SharedShardReads
) -> None:
    """Both shards read up to the end; new messages come; shard 0 asks alone: its read keeps
    shard 1's new messages, which shard 1's own ask then gets with no read of its own, in
    order and complete, then it reads on as before."""
    units = ShardUnit(2, 0), ShardUnit(2, 1)
    create_sharded(database_url, 2)
    first = append(database_url, 20)
    reached = {}
    for unit in units:
        answer = await shared.read("orders", unit, START, 100, None)
        reached[unit] = answer.messages[-1].at
    new = [m for m in append(database_url, 20) if m.at > first[-1].at]
    before = shared.reads
    zero = await shared.read("orders", units[0], reached[units[0]], 100, None)
    assert [m.at for m in zero.messages] == own(new, units[0])
    assert shared.reads == before + 1
    one = await shared.read("orders", units[1], reached[units[1]], 3, None)
    assert shared.reads == before + 1  # kept for it by shard 0's read
    rest = await shared.read("orders", units[1], one.messages[-1].at, 100, None)
    assert shared.reads == before + 1
    assert [m.at for m in one.messages + rest.messages] == own(new, units[1])
    after_all = await shared.read("orders", units[1], rest.messages[-1].at, 100, None)
    assert after_all.messages == []
    assert shared.reads == before + 2


def key_of(shard: int, shard_count: int) -> str:
    return next(k for k in KEYS if message_shard(k, 0, shard_count) == shard)


async def test_a_shard_asking_with_one_far_ahead_moves_past_the_rows_it_has_none_of(
    database_url: str, shared: SharedShardReads
) -> None:
    """Shard 0 has read its first 150 messages; shard 1, whose messages all come after them,
    starts at the beginning. Each read from shard 1's start fills its 64 rows with shard 0's
    old messages: shard 1 gets none of its own, and shard 0 is not reached. Unless shard 1
    moves past what such a read covered, they ask again together and the read repeats
    for ever."""
    zero, one = key_of(0, 2), key_of(1, 2)
    create_sharded(database_url, 2)
    messages = append(database_url, 200, [zero] * 150 + [one] * 50)
    units = ShardUnit(2, 0), ShardUnit(2, 1)
    read_to = {units[0]: messages[149].at, units[1]: START}
    got: dict[ShardUnit, list[Position]] = {unit: [] for unit in units}

    async def drain(unit: ShardUnit) -> None:
        for _ in range(50):
            answer = await shared.read("orders", unit, read_to[unit], 64, None)
            got[unit] += [m.at for m in answer.messages]
            if answer.messages:
                read_to[unit] = answer.messages[-1].at
            elif not answer.more:
                return
            # Asks again at once: it meets shard 0's ask, still waiting, in the next read.
        raise AssertionError(f"{unit} read 50 times without reaching the end")

    await asyncio.gather(*(drain(unit) for unit in units))
    assert got[units[0]] == []
    assert got[units[1]] == [m.at for m in messages[150:]]
    assert shared.reads <= 8, shared.reads


async def test_a_retired_start_fails_its_own_ask_only(
    database_url: str, shared: SharedShardReads
) -> None:
    create_sharded(database_url, 2)
    messages = append(database_url, 20)
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO outbox.retired_positions (publication_id, transaction_id, position)"
            " VALUES ('orders', %s::text::xid8, %s)",
            (messages[4].at.transaction_id, messages[4].at.position),
        )
    before, after = await asyncio.gather(
        shared.read("orders", ShardUnit(2, 0), START, 100, None),
        shared.read("orders", ShardUnit(2, 1), messages[4].at, 100, None),
        return_exceptions=True,
    )
    assert isinstance(before, Exception)
    assert "were retired by retention" in str(before)
    assert not isinstance(after, BaseException)
    assert [m.at for m in after.messages] == [
        at for at in own(messages, ShardUnit(2, 1)) if at > messages[4].at
    ]
