"""Every write of a leader is fenced in SQL: by the lease's token (a former leader that wakes
up writes nothing) and, where it has one, by the epoch the write was issued in (a write from
before a seek never lands after it). Driven through poller.store.leader_store against a real
PostgreSQL, with the operator's seek in between."""

import time
from typing import Any

import psycopg
import pytest

import outbox
from outbox.positions import Position
from poller import operations
from poller.store.leader_store import LeaderStore, try_acquire
from poller.store.message_reads import read_batch
from poller.store.records import Lease

pytestmark = pytest.mark.asyncio


def prepare(url: str) -> Any:
    with psycopg.connect(url, autocommit=True) as conn:
        operations.create(conn, "sub", "orders", "start", {})
        outbox.append(conn, "orders", "T", {})
        # Other tests' transactions on this server hold the safe frontier back a moment.
        deadline = time.monotonic() + 30
        while not (batch := read_batch(conn, "orders", Position(0, 0), 10)):
            assert time.monotonic() < deadline, "the message never became safe to read"
            time.sleep(0.01)
        return batch[0]


async def leader(url: str, holder: str) -> tuple[LeaderStore, float | None]:
    # The holder id is the session's application_name: a standby may take over once the
    # holder's session is gone, which is how each step here changes hands.
    conn = await psycopg.AsyncConnection.connect(url, autocommit=True, application_name=holder)
    lease = Lease("sub", holder, ttl_seconds=30)
    left = await try_acquire(conn, lease)
    return LeaderStore(conn, conn, lease), left


def parked_rows(url: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(url) as conn:
        return conn.execute("SELECT position, attempts FROM outbox.parked_messages").fetchall()


def request_replay(url: str) -> None:
    with psycopg.connect(url) as conn:
        operations.request_replay(conn, "sub")


async def test_a_former_leader_writes_nothing_after_a_takeover(database_url: str) -> None:
    message = prepare(database_url)
    former, left = await leader(database_url, "outbox-poller:former")
    assert left == 0.0, "nobody held the lease before"
    # The former leader's session stays open (paused, not gone); its lease expires.
    with psycopg.connect(database_url) as conn:
        conn.execute("UPDATE outbox.subscription_leaders SET expires_at = clock_timestamp()")
    current, left = await leader(database_url, "outbox-poller:current")
    assert left == 0.0, "an expired lease leaves nothing to wait for"
    assert current.lease.token == 2

    assert await former.park(0, message, 1, "late") is None
    assert not await former.write_checkpoint(0, message.at, {})
    assert parked_rows(database_url) == []

    assert await current.park(0, message, 1, "parked") == 1
    request_replay(database_url)
    (replay,) = await current.replay_requests()
    assert await former.repark_replayed(replay, 1, "late replay") is None
    assert not await former.unpark(message.at, replay.parked_at), "the former leader deleted a row"
    assert parked_rows(database_url) == [(message.position, 1)]
    assert await current.unpark(message.at, replay.parked_at)


async def test_a_replay_deletes_only_the_parked_row_it_read(database_url: str) -> None:
    message = prepare(database_url)
    store, _ = await leader(database_url, "outbox-poller:only")
    assert await store.park(0, message, 1, "first") == 1
    request_replay(database_url)
    (read_by_the_replay,) = await store.replay_requests()
    # Meanwhile a seek re-read the message and it was parked again: a newer row.
    assert await store.park(0, message, 1, "again, after a seek") == 2
    assert not await store.unpark(message.at, read_by_the_replay.parked_at)
    assert parked_rows(database_url) == [(message.position, 2)]


async def test_a_write_issued_before_a_seek_is_refused_after_it(database_url: str) -> None:
    message = prepare(database_url)
    store, _ = await leader(database_url, "outbox-poller:only")
    with psycopg.connect(database_url) as conn:
        _, epoch = operations.seek(conn, "sub", "start")
    assert epoch == 1

    # Issued in epoch 0 and moving forward: exactly the write that once undid a seek.
    assert not await store.write_checkpoint(0, message.at, {})
    assert await store.park(0, message, 1, "decided before the seek") is None
    assert await store.park(1, message, 2, "parked in the new epoch") == 2
    request_replay(database_url)
    (replay,) = await store.replay_requests()
    with psycopg.connect(database_url) as conn:
        operations.seek(conn, "sub", "start")
    assert await store.repark_replayed(replay, 1, "a replay outlives seeks") == 3
    assert await store.write_checkpoint(2, message.at, {})


async def test_a_takeover_of_a_live_lease_says_how_long_it_had_left(database_url: str) -> None:
    prepare(database_url)
    await leader(database_url, "outbox-poller:gone")
    # Its session is not named in pg_stat_activity any more, as after a kill or a cut.
    with psycopg.connect(database_url) as conn:
        conn.execute("UPDATE outbox.subscription_leaders SET holder = 'outbox-poller:vanished'")
    _, left = await leader(database_url, "outbox-poller:next")
    assert left is not None
    assert 25 < left <= 30
    # Taking back one's own lease (a reconnect) waits for nobody.
    _, again = await leader(database_url, "outbox-poller:next")
    assert again == 0.0


def replay_requested_at(url: str) -> list[Any]:
    with psycopg.connect(url) as conn:
        return [
            row[0] for row in conn.execute("SELECT replay_requested_at FROM outbox.parked_messages")
        ]


async def test_a_failed_replay_clears_the_request_it_read_and_keeps_a_later_one(
    database_url: str,
) -> None:
    message = prepare(database_url)
    store, _ = await leader(database_url, "outbox-poller:only")
    assert await store.park(0, message, 1, "first") == 1
    request_replay(database_url)
    (first,) = await store.replay_requests()
    assert await store.repark_replayed(first, 2, "failed again") == 3
    assert replay_requested_at(database_url) == [None]
    assert await store.replay_requests() == []

    request_replay(database_url)
    (second,) = await store.replay_requests()
    request_replay(database_url)  # asked again while the replay runs: it follows this one
    assert await store.repark_replayed(second, 1, "failed once more") == 4
    (third,) = await store.replay_requests()
    assert third.requested_at > second.requested_at
    assert third.parked_at > second.parked_at


async def test_a_replay_purged_while_it_runs_is_not_parked_again(database_url: str) -> None:
    message = prepare(database_url)
    store, _ = await leader(database_url, "outbox-poller:only")
    assert await store.park(0, message, 1, "first") == 1
    request_replay(database_url)
    (replay,) = await store.replay_requests()
    with psycopg.connect(database_url) as conn:
        assert operations.purge_parked(conn, "sub") == 1
    assert await store.repark_replayed(replay, 1, "failed again") is None
    assert parked_rows(database_url) == []
