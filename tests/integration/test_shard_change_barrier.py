"""The barrier of a change of the shard count, held by the database against the terms that
began before the change: they learn of it only at their next renewal, yet from the change's
commit on, every read and checkpoint of the old layout stops at the barrier, so the old
shards and the new ones never deliver the same message; and the barrier is past every writer
older than the change, which the change waits for. Scripted at the store level: a term is a
LeaderStore, as a running daemon's is, built before the change where it matters."""

import psycopg
import pytest

import outbox
from outbox.positions import START, Position
from poller import operations
from poller.membership import ShardUnit
from poller.operations import change_shard_count
from tests.integration.test_shard_leaders import append_safely, leader, stored

pytestmark = pytest.mark.asyncio


def shard_checkpoint(url: str, unit: ShardUnit) -> Position:
    [row] = stored(
        url,
        "SELECT last_processed_transaction_id::text::bigint, last_processed_position"
        " FROM outbox.subscription_shards WHERE shard_count = %s AND shard = %s",
        unit.shard_count,
        unit.shard,
    )
    return Position(*row)


@pytest.mark.parametrize("old_count", [1, 3])
async def test_a_term_begun_before_a_change_reads_and_checkpoints_no_further_than_its_barrier(
    database_url: str, old_count: int
) -> None:
    """A term of the old layout reads after the change as if it had not happened (it has not
    renewed yet): it must get nothing past the barrier, which the new shards deliver, and its
    checkpoint must stop there, or the end of the change passes with the new shards about to
    deliver what it delivered past the barrier."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        operations.create(conn, "sub", "orders", "start", {}, shards=old_count)
    before = append_safely(database_url, 40)
    old = [await leader(database_url, ShardUnit(old_count, s)) for s in range(old_count)]
    with psycopg.connect(database_url, autocommit=True) as conn:
        change = change_shard_count(conn, "sub", 2)
    assert change.barrier is not None
    every = append_safely(database_url, 40)  # after the barrier
    read_by_old = [m.at for store in old for m in await store.read_batch("orders", START, 1000)]
    assert sorted(read_by_old) == [at for at in every if at <= change.barrier] == before
    for store in old:
        assert await store.write_checkpoint(0, every[-1], {})  # past the barrier: held there
        assert shard_checkpoint(database_url, store.lease.unit) == change.barrier
        await store.release()
    new = [await leader(database_url, ShardUnit(2, s)) for s in range(2)]
    assert await new[0].shard_change_drained()
    read_by_new = [
        m.at for store in new for m in await store.read_batch("orders", change.barrier, 1000)
    ]
    assert sorted(read_by_new) == every[40:]
    assert not set(read_by_old) & set(read_by_new)


async def test_a_plain_terms_checkpoint_after_a_change_is_where_its_successor_starts(
    database_url: str,
) -> None:
    """A plain subscription's checkpoint is in its own row; a change of the count gives its one
    shard a row of its own. The term that delivered on after the change must write there, or
    its bounded successor starts behind what it finished and delivers it again."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        operations.create(conn, "sub", "orders", "start", {})
    positions = append_safely(database_url, 30)
    plain = await leader(database_url, ShardUnit(1, 0), "outbox-poller:plain")
    with psycopg.connect(database_url, autocommit=True) as conn:
        change_shard_count(conn, "sub", 2)
    assert await plain.write_checkpoint(0, positions[19], {})
    await plain.release()
    successor = await leader(database_url, ShardUnit(1, 0), "outbox-poller:successor")
    read = await successor.read_batch(
        "orders", shard_checkpoint(database_url, ShardUnit(1, 0)), 100
    )
    assert [m.at for m in read] == positions[20:]


async def test_a_writer_older_than_the_change_that_commits_during_it_is_the_old_shards(
    database_url: str,
) -> None:
    """A change takes a moment between choosing its barrier and committing. A writer that
    commits in that moment, and whose transaction is older than the change's, is safe to read
    before the change is seen: a term of the old layout reads it then, unbounded. So it must
    lie at or before the barrier, or the new shards deliver it again."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        operations.create(conn, "sub", "orders", "start", {}, shards=2)
    append_safely(database_url, 10)
    old = [await leader(database_url, ShardUnit(2, s)) for s in range(2)]
    with psycopg.connect(database_url) as writer, psycopg.connect(database_url) as changer:
        writer.execute("SELECT pg_current_xact_id()")  # older than the change
        late = outbox.append(writer, "orders", "T", {}, partition_key="late")
        change = change_shard_count(changer, "sub", 3)  # a savepoint: the change stays open
        writer.commit()
        read_by_old = {
            m.at.position for store in old for m in await store.read_batch("orders", START, 100)
        }
        changer.commit()
    assert late in read_by_old  # the old layout's, read before the change was committed
    assert change.barrier is not None
    for store in old:
        await store.release()
    new = [await leader(database_url, ShardUnit(3, s)) for s in range(3)]
    read_by_new = {
        m.at.position
        for store in new
        for m in await store.read_batch("orders", change.barrier, 100)
    }
    assert late not in read_by_new


async def test_a_change_ends_only_after_every_transaction_older_than_it(
    database_url: str,
) -> None:
    """A writer older than the change that appended before it may still commit after it, at or
    before the barrier: its messages are the old shards'. The change must not end while it may
    still commit, or nobody delivers them (the old shards' rows go, the new shards start after
    the barrier). An older writer that appends after the change committed is ordered after the
    change (commit order, docs/explanation/ordering.md), so past the barrier: the new shards'."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        operations.create(conn, "sub", "orders", "start", {}, shards=2)
    append_safely(database_url, 10)
    with psycopg.connect(database_url) as early, psycopg.connect(database_url) as later:
        early.execute("SELECT pg_current_xact_id()")  # both older than the change
        later.execute("SELECT pg_current_xact_id()")
        before = outbox.append(early, "orders", "T", {}, partition_key="before")
        with psycopg.connect(database_url, autocommit=True) as conn:
            change = change_shard_count(conn, "sub", 3)
        assert change.barrier is not None
        after = outbox.append(later, "orders", "T", {}, partition_key="after")
        old = [await leader(database_url, ShardUnit(2, s)) for s in range(2)]
        new = [await leader(database_url, ShardUnit(3, s)) for s in range(3)]
        for store in old:
            await store.read_batch("orders", START, 100)
            assert store.last_safe is not None
            assert await store.write_checkpoint(0, store.last_safe, {})
        assert not await new[0].shard_change_drained()
        early.commit()
        later.commit()
    delivered = []
    for store in old:
        start = shard_checkpoint(database_url, store.lease.unit)
        delivered += [m.at for m in await store.read_batch("orders", start, 100)]
    assert [at.position for at in delivered] == [before]
    assert delivered[0] <= change.barrier
    assert not await new[0].shard_change_drained()  # its shard has not finished it yet
    for store in old:
        assert store.last_safe is not None
        assert await store.write_checkpoint(0, store.last_safe, {})
    assert await new[0].shard_change_drained()
    read_by_new = [
        m.at for store in new for m in await store.read_batch("orders", change.barrier, 100)
    ]
    assert [at.position for at in read_by_new] == [after]
