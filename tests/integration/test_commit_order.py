"""A key's messages in the order their transactions committed, when the writers serialise on a
row lock and the later committer took its transaction id first (tests/support/locked_writers.py),
through every write path and every reader of the outbox."""

import datetime
from typing import Any

import psycopg
import pytest

import outbox
import poller
from poller import operations
from poller.message import Message
from tests.integration.test_daemon import (
    EAGER_CHECKPOINTS,
    Recorder,
    stored_checkpoint,
    subscribe,
    wait_for,
)
from tests.support.inprocess import running_daemon
from tests.support.locked_writers import WRITE_PATHS, append_through_a_row_lock


def delivered_ids(messages: list[Message]) -> list[str]:
    return [message.message_id for message in messages]


@pytest.mark.parametrize("path", list(WRITE_PATHS))
def test_every_write_path_orders_the_later_commit_after_the_earlier_one(
    database_url: str, path: str
) -> None:
    pair = append_through_a_row_lock(database_url, path=path)
    # The premise: ordered by the writers' own xids, Second would come first.
    assert pair.older_xid < pair.newer_xid
    assert pair.first < pair.second, pair
    # Never below the writer's own xid: the safe frontier's rule needs nothing more.
    assert pair.second.transaction_id >= pair.older_xid


def test_repeatable_read_writers_locking_before_their_first_write_commit_in_order(
    database_url: str,
) -> None:
    """Under REPEATABLE READ the snapshot is the transaction's first statement's, so a row lock
    taken after a first write gives no view of the lock holder's message. A transaction that
    takes its lock before it writes anything takes its xid after the holder committed, and
    that alone orders it after (docs/explanation/ordering.md)."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE aggregates (id text PRIMARY KEY, version int NOT NULL)")
        conn.execute("INSERT INTO aggregates VALUES ('a', 0)")
    holder = psycopg.connect(database_url)
    waiter = psycopg.connect(database_url)
    for conn in (holder, waiter):
        conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
    try:
        holder.execute("SELECT pg_advisory_xact_lock(42)")
        waiter.execute("SELECT 1")  # its snapshot, before the holder writes anything
        holder.execute("UPDATE aggregates SET version = version + 1")
        first = outbox.append(holder, "orders", "First", {}, partition_key="a")
        holder.commit()
        waiter.execute("SELECT pg_advisory_xact_lock(42)")
        second = outbox.append(waiter, "orders", "Second", {}, partition_key="a")
        waiter.commit()
    finally:
        holder.close()
        waiter.close()
    with psycopg.connect(database_url) as conn:
        rows = conn.execute(
            "SELECT message_type FROM outbox.messages ORDER BY transaction_id, position"
        ).fetchall()
    assert [row[0] for row in rows] == ["First", "Second"], (first, second)


def run_daemon_until(url: str, handler: Any, done: Any, subscription: str = "sub") -> None:
    with running_daemon(url, [subscription], handler):
        wait_for(done)


@pytest.mark.parametrize(
    "settings",
    [{}, {"strategy": "pinned", "consumers": 4}],
    ids=["one consumer", "pinned over four"],
)
def test_the_daemon_delivers_in_commit_order(database_url: str, settings: dict[str, Any]) -> None:
    subscribe(database_url, **settings)
    pair = append_through_a_row_lock(database_url)
    recorder = Recorder()
    run_daemon_until(database_url, recorder, lambda: len(recorder.messages) >= 2)
    assert delivered_ids(recorder.messages) == pair.message_ids
    wait_for(lambda: stored_checkpoint(database_url) == pair.second)


def test_a_sharded_subscription_delivers_in_commit_order(database_url: str) -> None:
    with psycopg.connect(database_url) as conn:
        operations.create(conn, "sub", "orders", "start", EAGER_CHECKPOINTS, shards=3)
    pair = append_through_a_row_lock(database_url)
    recorder = Recorder()
    run_daemon_until(database_url, recorder, lambda: len(recorder.messages) >= 2)
    assert delivered_ids(recorder.messages) == pair.message_ids


def test_a_batch_handler_gets_them_in_commit_order(database_url: str) -> None:
    subscribe(database_url, strategy="pinned", consumers=2)
    pair = append_through_a_row_lock(database_url)
    batches: list[list[Message]] = []

    @poller.batch_handler(max_batch_size=10)
    async def handle(messages: list[Message]) -> None:
        batches.append(list(messages))

    run_daemon_until(database_url, handle, lambda: sum(map(len, batches)) >= 2)
    assert delivered_ids([m for batch in batches for m in batch]) == pair.message_ids


def test_a_retried_first_message_still_comes_before_the_second(database_url: str) -> None:
    subscribe(database_url, strategy="pinned", consumers=4, retry_backoff_initial=0.01)
    pair = append_through_a_row_lock(database_url)

    def fail_first_once(message: Message) -> None:
        if message.message_id == pair.first_id and message.delivery_attempt == 1:
            raise RuntimeError("downstream blinked")

    recorder = Recorder(fail_first_once)
    run_daemon_until(database_url, recorder, lambda: len(recorder.messages) >= 3)
    assert delivered_ids(recorder.messages) == [pair.first_id, *pair.message_ids]


def test_parked_messages_replay_in_commit_order(database_url: str) -> None:
    subscribe(database_url, max_retry_count=1)
    pair = append_through_a_row_lock(database_url)
    healthy = {"now": False}

    def fail_until_healthy(message: Message) -> None:
        if not healthy["now"] and message.partition_key == pair.key:
            raise RuntimeError("downstream is down")

    recorder = Recorder(fail_until_healthy)
    with running_daemon(database_url, ["sub"], recorder):
        wait_for(lambda: stored_checkpoint(database_url) == pair.second)
        healthy["now"] = True
        with psycopg.connect(database_url) as conn:
            operations.request_replay(conn, "sub")
        wait_for(lambda: len(recorder.messages) >= 4)
    assert delivered_ids(recorder.messages) == pair.message_ids * 2


def test_the_catch_up_api_yields_them_in_commit_order(database_url: str) -> None:
    pair = append_through_a_row_lock(database_url)
    items = poller.subscribe_sync(database_url, "orders")
    try:
        received = [next(items) for _ in range(3)]
    finally:
        items.close()
    assert received[2] == poller.CaughtUp()
    assert delivered_ids(received[:2]) == pair.message_ids  # type: ignore[arg-type]


@pytest.mark.parametrize("seek", ["start", "message id", "time"])
def test_a_seek_redelivers_them_in_commit_order(database_url: str, seek: str) -> None:
    subscribe(database_url)
    pair = append_through_a_row_lock(database_url)
    recorder = Recorder()
    with running_daemon(database_url, ["sub"], recorder):
        wait_for(lambda: stored_checkpoint(database_url) == pair.second)
        with psycopg.connect(database_url) as conn:
            if seek == "start":
                operations.seek(conn, "sub", "start")
            elif seek == "message id":
                operations.seek_to_message(conn, "sub", pair.first_id)
            else:
                # The older writer started first: Second's appended_at is the earlier one.
                since = conn.execute("SELECT min(appended_at) FROM outbox.messages").fetchone()
                assert since is not None
                assert isinstance(since[0], datetime.datetime)
                operations.seek_to_time(conn, "sub", since[0])
        wait_for(lambda: len(recorder.messages) >= 4)
    assert delivered_ids(recorder.messages) == pair.message_ids * 2


def test_status_names_a_younger_transaction_that_holds_back_an_older_writers_message(
    database_url: str,
) -> None:
    """A message sorts after every transaction completed when it was appended, so a writer
    older than a running transaction can wait for it: status names that one."""
    subscribe(database_url)
    older = psycopg.connect(database_url)
    holder = psycopg.connect(database_url)
    try:
        older.execute("SELECT pg_current_xact_id()")  # the writer takes its xid first
        holder.execute("SELECT pg_current_xact_id()")  # then a younger one, left running
        with psycopg.connect(database_url) as completed:  # and a still younger one ends
            completed.execute("SELECT pg_current_xact_id()")
        outbox.append(older, "orders", "Held", {}, partition_key="k")
        older.commit()
        with psycopg.connect(database_url) as conn:
            (status,) = operations.status(conn)
        assert status.hidden
        assert [blocker.pid for blocker in status.blockers] == [holder.info.backend_pid]
    finally:
        holder.close()
        older.close()
    with psycopg.connect(database_url) as conn:
        (status,) = operations.status(conn)
    assert not status.hidden
