"""Handlers that overrun message_timeout, in the daemon against a real database: the attempt
fails at its deadline, but its slot and its key stay taken until the call returns, so no retry
runs beside it and nothing queues behind it; a batch call gets message_timeout per message."""

import asyncio
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import psycopg
import pytest

import outbox
import poller
from poller.message import Message
from tests.integration.test_daemon import subscribe, wait_for
from tests.support.inprocess import running_daemon


class Call(NamedTuple):
    label: str
    attempt: int
    started: float
    ended: float


class Timeline:
    """Each handler call's message label (its data's "label"), attempt and interval."""

    def __init__(self, hang: str, hang_for: float) -> None:
        self.calls: list[Call] = []
        self.lock = threading.Lock()
        self.hang, self.hang_for = hang, hang_for

    def delay(self, message: Message) -> float:
        first = message.data["label"] == self.hang and message.delivery_attempt == 1
        return self.hang_for if first else 0.0

    def record(self, message: Message, started: float) -> None:
        call = Call(message.data["label"], message.delivery_attempt, started, time.monotonic())
        with self.lock:
            self.calls.append(call)

    def sync_handler(self, message: Message) -> None:
        started = time.monotonic()
        time.sleep(self.delay(message))
        self.record(message, started)

    async def async_handler(self, message: Message) -> None:
        started = time.monotonic()
        await asyncio.sleep(self.delay(message))
        self.record(message, started)

    def labels(self) -> set[str]:
        with self.lock:
            return {call.label for call in self.calls}

    def call(self, label: str, attempt: int = 1) -> Call:
        with self.lock:
            (found,) = [c for c in self.calls if (c.label, c.attempt) == (label, attempt)]
        return found


def append_labelled(url: str, labels: Sequence[tuple[str, str | None]]) -> None:
    with psycopg.connect(url) as conn:
        messages = [
            outbox.NewMessage("T", {"label": label}, partition_key=key) for label, key in labels
        ]
        outbox.append_many(conn, "orders", messages)


def runtime(url: str) -> dict[str, Any]:
    """The figures the leader last stored (at each renewal that changed them)."""
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT runtime FROM outbox.subscription_leaders WHERE subscription_id = 'sub'"
        ).fetchone()
    return {} if row is None else dict(row[0])


def parked(url: str) -> list[Any]:
    with psycopg.connect(url) as conn:
        return conn.execute("SELECT position, last_error FROM outbox.parked_messages").fetchall()


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_a_hung_pinned_handler_keeps_its_key_and_holds_no_other_message_hostage(
    database_url: str, kind: str
) -> None:
    """k0's first call runs 2 s past a 0.5 s timeout: j's messages go through the other slot
    meanwhile; k0's retry waits for that call to return (it ran beside it, and k1..k3 after
    it), and k's order holds. Before, nothing was delivered and in_flight grew."""
    subscribe(
        database_url,
        strategy="pinned",
        max_in_flight=2,
        message_timeout=0.5,
        max_retry_count=3,
        retry_backoff_initial=0.05,
    )
    labels = [(f"k{n}", "k") for n in range(4)] + [(f"j{n}", "j") for n in range(4)]
    append_labelled(database_url, labels)
    timeline = Timeline("k0", 2.0)
    handler: Callable[..., Any] = (
        timeline.sync_handler if kind == "sync" else timeline.async_handler
    )
    with running_daemon(database_url, ["sub"], handler):
        wait_for(lambda: timeline.labels() >= {label for label, _ in labels}, timeout=20)
    hung, retry = timeline.call("k0", 1), timeline.call("k0", 2)
    assert all(timeline.call(f"j{n}").ended < hung.ended for n in range(4))
    assert retry.started >= hung.ended, "the retry ran beside the attempt it replaced"
    starts = [timeline.call(f"k{n}").started for n in (1, 2, 3)]
    assert retry.ended <= starts[0] <= starts[1] <= starts[2]
    assert parked(database_url) == []


def test_one_slot_waits_for_a_hung_handler_in_strict_order(database_url: str) -> None:
    """One consumer, one slot: everything waits for the hung call (strict order), then its
    retry goes first. Before, the machine freed the slot at the deadline and queued the rest
    behind the hung call (in_flight counted them)."""
    subscribe(database_url, message_timeout=0.5, max_retry_count=2, retry_backoff_initial=0.05)
    labels = [(f"m{n}", None) for n in range(4)]
    append_labelled(database_url, labels)
    timeline = Timeline("m0", 2.5)
    with running_daemon(database_url, ["sub"], timeline.sync_handler):
        # While m0's first call hangs, only it is in flight: nothing is queued behind it.
        wait_for(lambda: runtime(database_url).items() >= {"in_flight": 1, "buffered": 4}.items())
        assert not timeline.labels(), "a message ran while the hung call held the one slot"
        wait_for(lambda: timeline.labels() >= {"m0", "m1", "m2", "m3"}, timeout=20)
    with timeline.lock:
        order = [(call.label, call.attempt) for call in timeline.calls]
    assert order == [("m0", 1), ("m0", 2), ("m1", 1), ("m2", 1), ("m3", 1)]
    assert timeline.call("m0", 2).started >= timeline.call("m0", 1).ended


def test_a_batch_is_timed_per_message(database_url: str) -> None:
    """100 messages at 5 ms each under a 0.3 s timeout: every call returned normally, and
    all 100 were parked "timed out" (the batch was timed against one message's timeout)."""
    subscribe(database_url, message_timeout=0.3, max_retry_count=1)
    append_labelled(database_url, [(f"m{n}", None) for n in range(100)])
    handled: list[int] = []

    @poller.batch_handler(max_batch_size=100, max_batch_wait=0.5)
    def handle(messages: list[Message]) -> None:
        time.sleep(0.005 * len(messages))
        handled.extend(message.position for message in messages)

    with running_daemon(database_url, ["sub"], handle):
        wait_for(lambda: len(handled) >= 100, timeout=20)
    assert parked(database_url) == []
    assert len(handled) == len(set(handled)) == 100
