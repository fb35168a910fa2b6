"""The daemon in-process against a real database: order, checkpoints, retries, parking, replay."""

import dataclasses
import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

import outbox
from outbox.positions import Position
from poller import operations
from poller.handler_requests import ParkMessage, SkipMessage
from poller.message import Message
from tests.support.inprocess import FAST, running_daemon


def wait_for(condition: Callable[[], bool], timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.02)


def append(url: str, count: int, publication: str = "orders", **fields: Any) -> list[int]:
    with psycopg.connect(url) as conn:
        return [outbox.append(conn, publication, "T", {"n": n}, **fields) for n in range(count)]


# Checkpoint after every finished message, so tests can watch the checkpoint move live.
EAGER_CHECKPOINTS = {"checkpoint_after": 0.05, "min_checkpoint_count": 1}


def subscribe(url: str, name: str = "sub", **settings: Any) -> None:
    with psycopg.connect(url) as conn:
        operations.create(conn, name, "orders", "start", EAGER_CHECKPOINTS | settings)


def stored_checkpoint(url: str, name: str = "sub") -> Position:
    with psycopg.connect(url) as conn:
        return operations.get(conn, name).checkpoint


class Recorder:
    def __init__(self, behaviour: Callable[[Message], None] | None = None) -> None:
        self.messages: list[Message] = []
        self.lock = threading.Lock()
        self.behaviour = behaviour

    def __call__(self, message: Message) -> None:
        with self.lock:
            self.messages.append(message)
        if self.behaviour:
            self.behaviour(message)

    def positions(self) -> list[int]:
        with self.lock:
            return [m.position for m in self.messages]


def test_messages_are_delivered_in_order_and_the_final_checkpoint_is_written(
    database_url: str,
) -> None:
    subscribe(database_url)
    written = append(database_url, 50)
    recorder = Recorder()
    with running_daemon(database_url, ["sub"], recorder):
        wait_for(lambda: len(recorder.positions()) >= 50)
        later = append(database_url, 5)
        wait_for(lambda: len(recorder.positions()) >= 55)
    assert recorder.positions() == written + later
    last = recorder.messages[-1]
    assert stored_checkpoint(database_url) == Position(last.transaction_id, last.position)


def test_a_failing_message_is_retried_then_parked_and_the_stream_goes_on(
    database_url: str,
) -> None:
    subscribe(database_url, max_retry_count=3, retry_backoff_initial=0.01)
    poison = append(database_url, 1, message_id="poison")[0]
    after = append(database_url, 3)
    attempts: list[int] = []

    def fail_poison(message: Message) -> None:
        if message.position == poison:
            attempts.append(message.delivery_attempt)
            raise RuntimeError("cannot handle this one")

    recorder = Recorder(fail_poison)
    with running_daemon(database_url, ["sub"], recorder):
        wait_for(lambda: set(after) <= set(recorder.positions()))
        wait_for(lambda: stored_checkpoint(database_url).position >= after[-1])
    assert attempts == [1, 2, 3]
    with psycopg.connect(database_url) as conn:
        parked = operations.list_parked(conn, "sub", 10)
    assert [(row[0], row[4]) for row in parked] == [(poison, 3)]
    assert "RuntimeError: cannot handle this one" in parked[0][5]


def test_replay_redelivers_parked_messages_without_moving_the_checkpoint(
    database_url: str,
) -> None:
    subscribe(database_url, max_retry_count=1)
    poison = append(database_url, 1)[0]
    healthy = {"now": False}

    def fail_until_healthy(message: Message) -> None:
        if message.position == poison and not healthy["now"]:
            raise RuntimeError("downstream is down")

    recorder = Recorder(fail_until_healthy)
    with running_daemon(database_url, ["sub"], recorder):
        wait_for(lambda: stored_checkpoint(database_url).position >= poison)
        checkpoint = stored_checkpoint(database_url)
        healthy["now"] = True
        with psycopg.connect(database_url) as conn:
            operations.request_replay(conn, "sub")
        wait_for(lambda: recorder.positions().count(poison) == 2)

        def unparked() -> bool:
            with psycopg.connect(database_url) as conn:
                return operations.list_parked(conn, "sub", 10) == []

        wait_for(unparked)
        assert stored_checkpoint(database_url) == checkpoint


def test_a_handler_can_park_or_skip_a_message_on_purpose(database_url: str) -> None:
    subscribe(database_url)
    park_me, skip_me, plain = append(database_url, 3)

    def decide(message: Message) -> None:
        if message.position == park_me:
            raise ParkMessage("schema version 1 is retired")
        if message.position == skip_me:
            raise SkipMessage()

    recorder = Recorder(decide)
    with running_daemon(database_url, ["sub"], recorder):
        wait_for(lambda: plain in recorder.positions())
    assert recorder.positions() == [park_me, skip_me, plain]
    with psycopg.connect(database_url) as conn:
        parked = operations.list_parked(conn, "sub", 10)
    assert [(row[0], row[5]) for row in parked] == [(park_me, "schema version 1 is retired")]
    assert stored_checkpoint(database_url).position == plain


def test_seek_while_running_redelivers_from_the_new_position(database_url: str) -> None:
    subscribe(database_url)
    first = append(database_url, 5)
    recorder = Recorder()
    with running_daemon(database_url, ["sub"], recorder):
        wait_for(lambda: len(recorder.positions()) == 5)
        wait_for(lambda: stored_checkpoint(database_url).position == first[-1])
        with psycopg.connect(database_url) as conn:
            _, epoch = operations.seek(conn, "sub", "start")
        assert epoch == 1
        wait_for(lambda: len(recorder.positions()) == 10)
        wait_for(lambda: stored_checkpoint(database_url).position == first[-1])
    assert recorder.positions() == first + first


def test_two_subscriptions_in_one_process_each_get_their_publication(database_url: str) -> None:
    with psycopg.connect(database_url) as conn:
        operations.create(conn, "a", "orders", "start", {})
        operations.create(conn, "b", "payments", "start", {})
    orders = append(database_url, 3, "orders")
    payments = append(database_url, 2, "payments")
    recorder = Recorder()
    with running_daemon(database_url, ["a", "b"], recorder):
        wait_for(lambda: len(recorder.positions()) == 5)
    by_publication = {
        p: [m.position for m in recorder.messages if m.publication == p]
        for p in ("orders", "payments")
    }
    assert by_publication == {"orders": orders, "payments": payments}


def test_reading_resumes_after_a_seek_empties_a_full_stuck_buffer(database_url: str) -> None:
    # One key, its head backing off for a long time: the buffer fills behind it and no handler
    # runs. A seek past it all drops the buffer; nothing acks, yet reading must go on.
    subscribe(
        database_url,
        strategy="pinned",
        buffer_size=4,
        read_batch_size=4,
        retry_backoff_initial=60.0,
        retry_backoff_max=60.0,
    )
    stuck = append(database_url, 6, partition_key="k")

    def fail_stuck(message: Message) -> None:
        if message.position in stuck:
            raise RuntimeError("down")

    recorder = Recorder(fail_stuck)
    with running_daemon(database_url, ["sub"], recorder):
        wait_for(lambda: recorder.positions() == [stuck[0]])
        with psycopg.connect(database_url) as conn:
            operations.seek(conn, "sub", "end")
        time.sleep(1.0)  # a lease renewal brings the seek to the leader
        fresh = append(database_url, 1, partition_key="k")[0]
        wait_for(lambda: fresh in recorder.positions(), timeout=10)
    assert recorder.positions() == [stuck[0], fresh]


def test_a_failing_stall_diagnosis_never_stops_delivery(
    database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    subscribe(database_url)
    with psycopg.connect(database_url) as conn:
        # The view the diagnosis reads breaks (an xid it cannot widen, a privilege missing).
        conn.execute(
            "CREATE OR REPLACE FUNCTION outbox.widen_xid(running xid) RETURNS xid8"
            " LANGUAGE plpgsql AS $$BEGIN RAISE EXCEPTION 'diagnosis broken'; END$$"
        )
    recorder = Recorder()
    options = dataclasses.replace(FAST, stall_threshold=0.1)
    with running_daemon(database_url, ["sub"], recorder, options):
        with psycopg.connect(database_url) as blocker:
            blocker.execute("SELECT pg_current_xact_id()")
            written = append(database_url, 3)
            wait_for(lambda: "cannot name the blockers" in caplog.text)
        wait_for(lambda: recorder.positions() == written)


def test_a_timeout_counts_handler_time_not_time_waiting_for_a_thread(database_url: str) -> None:
    """Review: one slow message, message_timeout 1, one handler thread: messages waiting for
    the thread were parked "timed out after 1.0s" without their handler ever being called.
    One attempt each, so any such timeout shows as a parked row."""
    subscribe(database_url, consumers=4, message_timeout=1.0, max_retry_count=1)
    written = append(database_url, 6)
    slow = written[0]

    def sleep_on_the_first(message: Message) -> None:
        if message.position == slow:
            time.sleep(2.5)

    recorder = Recorder(sleep_on_the_first)
    options = dataclasses.replace(FAST, handler_threads=1)
    with running_daemon(database_url, ["sub"], recorder, options):
        wait_for(lambda: set(recorder.positions()) >= set(written[1:]), timeout=30)
    with psycopg.connect(database_url) as conn:
        parked = {row[0] for row in conn.execute("SELECT position FROM outbox.parked_messages")}
    assert parked <= {slow}, f"parked without their handler timing out: {parked - {slow}}"
