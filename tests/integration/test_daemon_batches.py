"""Batch handlers in the daemon against a real database: many messages per call, outcomes per
message, and under `pinned` no key in two batches at once and key order across batches."""

import collections
import threading
import time
from typing import Any

import psycopg

import outbox
import poller
from outbox.positions import Position
from poller.handler_requests import ParkMessage, RetryMessage
from poller.message import Message
from tests.integration.test_daemon import stored_checkpoint, subscribe, wait_for
from tests.support.inprocess import running_daemon


def append_keyed(url: str, count: int, keys: int) -> list[Position]:
    """One transaction, so the whole backlog is there when the daemon starts reading."""
    with psycopg.connect(url) as conn:
        messages = [
            outbox.NewMessage("T", {"n": n}, partition_key=f"key-{n % keys}") for n in range(count)
        ]
        positions = outbox.append_many(conn, "orders", messages)
        row = conn.execute("SELECT pg_current_xact_id()::text::bigint").fetchone()
    assert row is not None
    return [Position(row[0], position) for position in positions]


class BatchRecorder:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.batches: list[list[Message]] = []

    def record(self, messages: list[Message]) -> None:
        with self.lock:
            self.batches.append(list(messages))

    def handled(self) -> list[Message]:
        with self.lock:
            return [message for batch in self.batches for message in batch]


def test_a_batch_handler_takes_many_messages_per_call_in_order(database_url: str) -> None:
    subscribe(database_url)
    written = append_keyed(database_url, 300, keys=7)
    recorder = BatchRecorder()

    @poller.batch_handler(max_batch_size=50)
    def handle(messages: list[Message]) -> None:
        recorder.record(messages)

    with running_daemon(database_url, ["sub"], handle):
        wait_for(lambda: len(recorder.handled()) >= 300)
    assert [message.at for message in recorder.handled()] == written
    sizes = [len(batch) for batch in recorder.batches]
    assert max(sizes) == 50, sizes
    assert stored_checkpoint(database_url) == written[-1]


def test_outcomes_by_position_retry_and_park_only_the_messages_named(database_url: str) -> None:
    subscribe(database_url, max_retry_count=2, retry_backoff_initial=0.01)
    written = append_keyed(database_url, 120, keys=5)
    retried_once, poison = written[10], written[70]
    recorder = BatchRecorder()

    @poller.batch_handler(max_batch_size=40)
    async def handle(messages: list[Message]) -> dict[Position, BaseException]:
        recorder.record(messages)
        failures: dict[Position, BaseException] = {}
        for message in messages:
            if message.at == retried_once and message.delivery_attempt == 1:
                failures[message.at] = RetryMessage()
            elif message.at == poison:
                failures[message.at] = ParkMessage("poison")
        return failures

    with running_daemon(database_url, ["sub"], handle):
        wait_for(lambda: stored_checkpoint(database_url) == written[-1])
    attempts = collections.Counter(message.at for message in recorder.handled())
    assert set(attempts) == set(written)
    assert attempts[retried_once] == 2
    assert attempts[poison] == 1  # a park request parks at once
    assert {at: n for at, n in attempts.items() if n > 1} == {retried_once: 2}
    with psycopg.connect(database_url) as conn:
        parked = conn.execute("SELECT position, last_error FROM outbox.parked_messages").fetchall()
    assert [(position, error) for position, error in parked] == [(poison.position, "poison")]


def test_pinned_batches_never_hold_a_key_twice_and_keep_key_order(database_url: str) -> None:
    """Four consumers with two slots each run batches at once; some batches fail whole."""
    subscribe(database_url, strategy="pinned", consumers=4, max_in_flight=2, max_retry_count=10)
    written = append_keyed(database_url, 600, keys=12)
    recorder = BatchRecorder()
    running: collections.Counter[str] = collections.Counter()
    overlaps: list[str] = []
    calls = 0

    @poller.batch_handler(max_batch_size=20, max_batch_wait=0.005)
    def handle(messages: list[Message]) -> None:
        nonlocal calls
        keys = [message.partition_key or "" for message in messages]
        with recorder.lock:
            calls += 1
            fail = calls % 5 == 0  # every fifth call fails whole: each message is retried
            overlaps.extend(key for key in keys if running[key])
            running.update(keys)
        try:
            time.sleep(0.002)
            if fail:
                raise RuntimeError("the broker is down")
            recorder.record(messages)
        finally:
            with recorder.lock:
                running.subtract(keys)

    with running_daemon(database_url, ["sub"], handle):
        wait_for(lambda: stored_checkpoint(database_url) == written[-1], timeout=60)
    assert not overlaps, f"keys in two batches at once: {sorted(set(overlaps))}"
    for batch in recorder.batches:
        keys = [message.partition_key for message in batch]
        assert len(keys) == len(set(keys)), f"a key twice in one batch: {keys}"
    handled = recorder.handled()
    assert sorted(message.at for message in handled) == written  # each once: only fails repeat
    by_key: dict[Any, list[Position]] = collections.defaultdict(list)
    for message in handled:
        by_key[message.partition_key].append(message.at)
    assert all(positions == sorted(positions) for positions in by_key.values())
    assert max(len(batch) for batch in recorder.batches) > 1
