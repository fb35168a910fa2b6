"""`outbox parked replay` and `purge` of one parked message or all, against a real daemon: a
replay asked while no daemon runs waits in the parked row for the next leader, outlives a
seek, goes to the leader of the message's shard, and a purge during a replay wins."""

import logging
import threading
from typing import Any

import psycopg
import pytest

import outbox
from outbox.positions import Position
from poller import operations
from poller.handler_requests import ParkMessage
from poller.membership import Layout, ShardUnit
from poller.message import Message
from poller.store.leader_store import LeaderStore, try_acquire
from poller.store.records import Lease
from tests.integration.test_daemon import Recorder, wait_for
from tests.support.inprocess import running_daemon


def parked(url: str, count: int, *, shards: int = 1) -> list[Position]:
    """`count` messages (ids m-0, m-1, ...; keys k-0, k-1, ...) that subscription `sub`, which
    starts after them, has parked."""
    with psycopg.connect(url) as conn:
        positions = [
            outbox.append(
                conn, "orders", "T", {"n": n}, message_id=f"m-{n}", partition_key=f"k-{n}"
            )
            for n in range(count)
        ]
        rows = conn.execute(
            "SELECT transaction_id::text::bigint, position FROM outbox.messages"
            " WHERE position = ANY(%s) ORDER BY position",
            (positions,),
        ).fetchall()
    at = [Position(*row) for row in rows]
    with psycopg.connect(url) as conn:
        settings = {"checkpoint_after": 0.05, "min_checkpoint_count": 1}
        operations.create(conn, "sub", "orders", str(max(at)), settings, shards)
        for place in at:
            conn.execute(
                "INSERT INTO outbox.parked_messages"
                " (subscription_id, position, transaction_id, attempts, last_error)"
                " VALUES ('sub', %s, %s::text::xid8, 3, 'boom')",
                (place.position, str(place.transaction_id)),
            )
    return at


def parked_positions(url: str) -> list[int]:
    with psycopg.connect(url) as conn:
        return [row[0] for row in operations.list_parked(conn, "sub", 100)]


def request_replay(url: str, at: str | None = None, message_id: str | None = None) -> Any:
    with psycopg.connect(url) as conn:
        target = operations.parked_target(conn, "sub", at, message_id)
        return operations.request_replay(conn, "sub", target)


def test_a_replay_asked_while_no_daemon_runs_is_carried_out_by_the_next_leader(
    database_url: str,
) -> None:
    first, second, third = parked(database_url, 3)
    by_position = request_replay(database_url, str(first.position))
    assert by_position.marked == [(first, ShardUnit(1, 0))]
    assert not by_position.leader_alive
    assert request_replay(database_url, message_id="m-2").marked == [(third, ShardUnit(1, 0))]
    recorder = Recorder()
    with running_daemon(database_url, ["sub"], recorder):
        wait_for(lambda: parked_positions(database_url) == [second.position])
    assert sorted(recorder.positions()) == [first.position, third.position]


def test_a_replay_in_flight_outlives_a_seek(database_url: str) -> None:
    (poison,) = parked(database_url, 1)
    entered, release = threading.Event(), threading.Event()
    replays = []

    def hold_the_replay(message: Message) -> None:
        if message.delivery_attempt == 1 and not entered.is_set():
            replays.append(message.position)
            entered.set()
            assert release.wait(15)

    with running_daemon(database_url, ["sub"], Recorder(hold_the_replay)):
        request_replay(database_url)
        assert entered.wait(15)
        with psycopg.connect(database_url) as conn:
            operations.seek(conn, "sub", "end")  # a new epoch while the replay runs
        release.set()
        wait_for(lambda: parked_positions(database_url) == [])
    assert replays == [poison.position]


def test_a_purge_during_a_replay_wins_over_the_replay_failing_again(
    database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="poller.daemon.term.term_writes")
    poison, other = parked(database_url, 2)
    entered, release = threading.Event(), threading.Event()

    def fail_after_the_purge(_message: Message) -> None:
        entered.set()
        assert release.wait(15)
        raise ParkMessage("still failing")

    with running_daemon(database_url, ["sub"], Recorder(fail_after_the_purge)):
        request_replay(database_url, f"{poison.transaction_id}:{poison.position}")
        assert entered.wait(15)
        with psycopg.connect(database_url) as conn:
            target = operations.parked_target(conn, "sub", None, "m-0")
            assert operations.purge_parked(conn, "sub", target) == 1
        release.set()
        # The failed replay would park it again: the leader says why it does not.
        wait_for(lambda: "was purged while it was replayed; not parked again" in caplog.text)
    assert parked_positions(database_url) == [other.position]


async def test_each_shard_replays_only_its_own_parked_messages(database_url: str) -> None:
    messages = parked(database_url, 8, shards=2)
    requested = request_replay(database_url)
    shard_of = {at: unit for at, unit in requested.marked}
    assert set(shard_of) == set(messages)
    assert {unit.shard for unit in shard_of.values()} == {0, 1}
    for shard in (0, 1):
        unit = ShardUnit(2, shard)
        conn = await psycopg.AsyncConnection.connect(database_url, autocommit=True)
        async with conn:
            lease = Lease("sub", f"outbox-poller:shard-{shard}", ttl_seconds=30, unit=unit)
            await try_acquire(conn, lease)
            store = LeaderStore(conn, conn, lease, Layout(2))
            replays = [request.message.at for request in await store.replay_requests()]
        assert replays == sorted(at for at, owner in shard_of.items() if owner == unit)
