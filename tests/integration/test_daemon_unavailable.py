"""A handler whose destination is down (DestinationUnavailable): the messages wait with
backoff however long the outage lasts, nothing is parked, the checkpoint holds, and delivery
resumes in order once the destination is back."""

import threading
from typing import Any

import psycopg
import pytest

import poller
from outbox.positions import START
from poller.handler_requests import DestinationUnavailable
from poller.message import Message
from tests.integration.test_daemon import append, stored_checkpoint, subscribe, wait_for
from tests.support.inprocess import running_daemon

# Fewer attempts than the outage lasts: were an outage counted, every message would park.
SETTINGS: dict[str, Any] = {
    "max_retry_count": 2,
    "retry_backoff_initial": 0.01,
    "retry_backoff_max": 0.05,
}
OUTAGE_CALLS = 8


class FlakyDestination:
    """Down for the first OUTAGE_CALLS calls, then records what it is given."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.calls = 0
        self.received: list[Message] = []

    def take(self, messages: list[Message]) -> None:
        with self.lock:
            self.calls += 1
            if self.calls <= OUTAGE_CALLS:
                raise DestinationUnavailable("broker down")
            self.received += messages


def destination_unavailable(url: str) -> str | None:
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT destination_unavailable FROM outbox.subscription_status"
        ).fetchone()
    assert row is not None
    return row[0]  # type: ignore[no-any-return]


def parked_count(url: str) -> int:
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT count(*) FROM outbox.parked_messages").fetchone()
    assert row is not None
    return int(row[0])


@pytest.mark.parametrize("kind", ["batch", "one message, def"])
def test_an_outage_parks_nothing_and_delivery_resumes_in_order(
    database_url: str, kind: str
) -> None:
    subscribe(database_url, **SETTINGS)
    destination = FlakyDestination()

    @poller.batch_handler(max_batch_size=5)
    async def batch(messages: list[Message]) -> None:
        destination.take(messages)

    def one(message: Message) -> None:
        destination.take([message])

    written = append(database_url, 20)
    with running_daemon(database_url, ["sub"], batch if kind == "batch" else one):
        wait_for(lambda: destination.calls >= OUTAGE_CALLS // 2)
        assert stored_checkpoint(database_url) == START  # nothing confirmed, nothing passed
        # The leader says why it cannot deliver, in the view operators read.
        wait_for(lambda: destination_unavailable(database_url) == "broker down")
        wait_for(lambda: len(destination.received) >= len(written))
        wait_for(lambda: stored_checkpoint(database_url).position == written[-1])
        wait_for(lambda: destination_unavailable(database_url) is None)  # said while it lasts
    assert destination.calls > OUTAGE_CALLS
    assert [message.position for message in destination.received] == written
    assert parked_count(database_url) == 0
    # The outage did not use up attempts: the first delivery after it is attempt 1.
    assert destination.received[0].delivery_attempt == 1
