"""Timeouts, retries with backoff, parking, and handler-requested outcomes."""

import pytest

from poller.subscription import START, Park, Strategy, WriteCheckpoint
from tests.unit.subscription.support import (
    at,
    make_machine,
    make_settings,
    message,
    only_delivery,
)


def test_backoff_doubles_per_attempt_up_to_the_maximum() -> None:
    settings = make_settings(retry_backoff_initial=0.1, retry_backoff_max=1.0)
    delays = [settings.retry_delay(attempt) for attempt in range(1, 7)]
    assert delays == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.0, 1.0])
    assert settings.retry_delay(100_000) == 1.0  # no OverflowError for absurd attempts


def test_a_failed_message_is_redelivered_exactly_after_its_backoff() -> None:
    settings = make_settings(Strategy.ROUND_ROBIN, retry_backoff_initial=0.5)
    machine = make_machine(settings)
    first = only_delivery(machine.messages_read([message(1)], 0, 0.0))

    assert machine.failed(first.delivery_id, "boom", 10.0) == []
    assert machine.retry_queue_length == 1
    assert machine.tick(10.49) == []
    second = only_delivery(machine.tick(10.5))
    assert (second.envelope.position, second.attempt) == (at(1), 2)
    assert machine.retry_queue_length == 0

    assert machine.failed(second.delivery_id, "boom", 20.0) == []
    assert machine.tick(20.99) == []
    assert only_delivery(machine.tick(21.0)).attempt == 3


def test_a_timed_out_delivery_is_retried_and_its_late_ack_ignored() -> None:
    settings = make_settings(Strategy.ROUND_ROBIN, message_timeout=30.0)
    machine = make_machine(settings)
    first = only_delivery(machine.messages_read([message(1)], 0, 0.0))

    assert machine.tick(29.99) == []
    assert machine.in_flight_by_consumer == {0: 1}
    assert machine.tick(30.0) == []
    assert machine.in_flight_by_consumer == {}

    # The handler finishes after the timeout: too late, the message is being retried.
    assert machine.acked(first.delivery_id, 30.05) == []
    assert machine.checkpoint == START
    retry = only_delivery(machine.tick(30.0 + settings.retry_backoff_initial))
    assert retry.attempt == 2
    assert machine.acked(retry.delivery_id, 31.0) == [WriteCheckpoint(at(1))]


def test_a_message_is_parked_after_max_retry_count_attempts() -> None:
    settings = make_settings(Strategy.ROUND_ROBIN, consumers=1, max_retry_count=3)
    machine = make_machine(settings)
    now = 0.0
    delivery = only_delivery(machine.messages_read([message(1)], 0, now))
    for attempt in (1, 2):
        assert delivery.attempt == attempt
        assert machine.failed(delivery.delivery_id, f"boom {attempt}", now) == []
        now += 1.0
        delivery = only_delivery(machine.tick(now))

    assert delivery.attempt == 3
    (park,) = machine.failed(delivery.delivery_id, "boom 3", now)
    assert isinstance(park, Park)
    assert (park.envelope.position, park.attempts, park.replayed) == (at(1), 3, False)
    assert "boom 3" in park.reason
    assert machine.tick(now + 100.0) == []  # no fourth attempt

    # Later messages go on; the checkpoint waits for the parked row to be durable.
    assert only_delivery(machine.messages_read([message(2)], 0, now + 101.0)).attempt == 1
    assert machine.checkpoint == START
    assert machine.parked(at(1), now + 102.0) == [WriteCheckpoint(at(1))]


def test_handler_requested_park_is_immediate_and_durable_before_finished() -> None:
    machine = make_machine(make_settings(Strategy.ROUND_ROBIN))
    delivery = only_delivery(machine.messages_read([message(1)], 0, 0.0))
    commands = machine.requested_park(delivery.delivery_id, "poison pill", 1.0)
    assert commands == [Park(message(1), 1, "poison pill")]
    assert machine.checkpoint == START
    assert machine.buffered_count == 1
    assert machine.parked(at(1), 2.0) == [WriteCheckpoint(at(1))]
    assert machine.buffered_count == 0


def test_handler_requested_skip_finishes_the_message() -> None:
    machine = make_machine(make_settings(Strategy.ROUND_ROBIN))
    delivery = only_delivery(machine.messages_read([message(1)], 0, 0.0))
    assert machine.requested_skip(delivery.delivery_id, 1.0) == [WriteCheckpoint(at(1))]


def test_handler_requested_retry_counts_as_an_attempt() -> None:
    settings = make_settings(Strategy.ROUND_ROBIN, max_retry_count=2)
    machine = make_machine(settings)
    delivery = only_delivery(machine.messages_read([message(1)], 0, 0.0))
    assert machine.requested_retry(delivery.delivery_id, 1.0) == []
    delivery = only_delivery(machine.tick(1.0 + settings.retry_backoff_initial))
    (park,) = machine.requested_retry(delivery.delivery_id, 2.0)
    assert isinstance(park, Park)
    assert park.attempts == 2


def test_unknown_and_repeated_outcomes_are_ignored() -> None:
    machine = make_machine(make_settings(Strategy.ROUND_ROBIN))
    delivery = only_delivery(machine.messages_read([message(1)], 0, 0.0))
    assert machine.acked(12345, 1.0) == []
    assert machine.acked(delivery.delivery_id, 1.0) == [WriteCheckpoint(at(1))]
    assert machine.failed(delivery.delivery_id, "late", 1.0) == []
    assert machine.requested_park(delivery.delivery_id, "late", 1.0) == []
    assert machine.checkpoint == at(1)
    assert machine.retry_queue_length == 0


def test_an_earlier_now_counts_as_the_latest_seen() -> None:
    settings = make_settings(Strategy.ROUND_ROBIN, consumers=1, max_in_flight=2, message_timeout=5)
    machine = make_machine(settings)
    machine.messages_read([message(1)], 0, 10.0)
    assert machine.tick(14.0) == []
    # A stale clock read: the delivery's deadline is 14 + 5, not 3 + 5.
    only_delivery(machine.messages_read([message(2)], 0, 3.0))
    machine.tick(15.0)
    assert machine.in_flight_by_consumer == {0: 1}
