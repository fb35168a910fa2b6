"""Timeouts, retries with backoff, parking, and handler-requested outcomes."""

import pytest

from poller.subscription import START, Park, Strategy, WriteCheckpoint
from tests.unit.subscription.support import (
    acked,
    at,
    deliveries,
    failed,
    make_machine,
    make_settings,
    message,
    only_delivery,
    requested_park,
    requested_retry,
    requested_skip,
    unavailable,
    withdrawn,
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

    assert failed(machine, first.delivery_id, "boom", 10.0) == []
    assert machine.retry_queue_length == 1
    assert machine.tick(10.49) == []
    second = only_delivery(machine.tick(10.5))
    assert (second.envelope.position, second.attempt) == (at(1), 2)
    assert machine.retry_queue_length == 0

    assert failed(machine, second.delivery_id, "boom", 20.0) == []
    assert machine.tick(20.99) == []
    assert only_delivery(machine.tick(21.0)).attempt == 3


def test_a_timed_out_delivery_is_retried_and_its_late_ack_ignored() -> None:
    settings = make_settings(Strategy.ROUND_ROBIN, message_timeout=30.0)
    machine = make_machine(settings)
    first = only_delivery(machine.messages_read([message(1)], 0, 0.0))
    assert machine.started([[first.delivery_id]], 0.0) == []

    assert machine.tick(29.99) == []
    assert machine.in_flight_by_consumer == {0: 1}
    assert machine.tick(30.0) == []
    assert machine.retry_queue_length == 1
    assert machine.in_flight_by_consumer == {0: 1}  # its handler still runs

    # The handler finishes after the timeout: too late, the message is being retried.
    assert acked(machine, first.delivery_id, 30.05) == []
    assert machine.in_flight_by_consumer == {}
    assert machine.checkpoint == START
    retry = only_delivery(machine.tick(30.0 + settings.retry_backoff_initial))
    assert retry.attempt == 2
    machine.started([[retry.delivery_id]], 30.5)
    assert acked(machine, retry.delivery_id, 31.0) == [WriteCheckpoint(at(1), 0)]


def test_a_message_is_parked_after_max_retry_count_attempts() -> None:
    settings = make_settings(Strategy.ROUND_ROBIN, consumers=2, max_retry_count=3)
    machine = make_machine(settings)
    now = 0.0
    delivery = only_delivery(machine.messages_read([message(1)], 0, now))
    for attempt in (1, 2):
        assert delivery.attempt == attempt
        assert failed(machine, delivery.delivery_id, f"boom {attempt}", now) == []
        now += 1.0
        delivery = only_delivery(machine.tick(now))

    assert delivery.attempt == 3
    (park,) = failed(machine, delivery.delivery_id, "boom 3", now)
    assert isinstance(park, Park)
    assert (park.envelope.position, park.attempts, park.replayed) == (at(1), 3, False)
    assert "boom 3" in park.reason
    assert machine.tick(now + 100.0) == []  # no fourth attempt

    # Later messages go on; the checkpoint waits for the parked row to be durable.
    assert only_delivery(machine.messages_read([message(2)], 0, now + 101.0)).attempt == 1
    assert machine.checkpoint == START
    assert machine.parked(at(1), 0, now + 102.0) == [WriteCheckpoint(at(1), 0)]


def test_handler_requested_park_is_immediate_and_durable_before_finished() -> None:
    machine = make_machine(make_settings(Strategy.ROUND_ROBIN))
    delivery = only_delivery(machine.messages_read([message(1)], 0, 0.0))
    commands = requested_park(machine, delivery.delivery_id, "poison pill", 1.0)
    assert commands == [Park(message(1), 1, "poison pill", 0)]
    assert machine.checkpoint == START
    assert machine.buffered_count == 1
    assert machine.parked(at(1), 0, 2.0) == [WriteCheckpoint(at(1), 0)]
    assert machine.buffered_count == 0


def test_handler_requested_skip_finishes_the_message() -> None:
    machine = make_machine(make_settings(Strategy.ROUND_ROBIN))
    delivery = only_delivery(machine.messages_read([message(1)], 0, 0.0))
    assert requested_skip(machine, delivery.delivery_id, 1.0) == [WriteCheckpoint(at(1), 0)]


def test_handler_requested_retry_counts_as_an_attempt() -> None:
    settings = make_settings(Strategy.ROUND_ROBIN, max_retry_count=2)
    machine = make_machine(settings)
    delivery = only_delivery(machine.messages_read([message(1)], 0, 0.0))
    assert requested_retry(machine, delivery.delivery_id, 1.0) == []
    delivery = only_delivery(machine.tick(1.0 + settings.retry_backoff_initial))
    (park,) = requested_retry(machine, delivery.delivery_id, 2.0)
    assert isinstance(park, Park)
    assert park.attempts == 2


def test_unknown_and_repeated_outcomes_are_ignored() -> None:
    machine = make_machine(make_settings(Strategy.ROUND_ROBIN))
    delivery = only_delivery(machine.messages_read([message(1)], 0, 0.0))
    assert acked(machine, 12345, 1.0) == []
    assert acked(machine, delivery.delivery_id, 1.0) == [WriteCheckpoint(at(1), 0)]
    assert failed(machine, delivery.delivery_id, "late", 1.0) == []
    assert requested_park(machine, delivery.delivery_id, "late", 1.0) == []
    assert machine.checkpoint == at(1)
    assert machine.retry_queue_length == 0


def test_an_earlier_now_counts_as_the_latest_seen() -> None:
    settings = make_settings(Strategy.ROUND_ROBIN, consumers=1, max_in_flight=2, message_timeout=5)
    machine = make_machine(settings)
    first = only_delivery(machine.messages_read([message(1)], 0, 10.0))
    machine.started([[first.delivery_id]], 10.0)
    assert machine.tick(14.0) == []
    # A stale clock read: the delivery's deadline is 14 + 5, not 3 + 5.
    second = only_delivery(machine.messages_read([message(2)], 0, 3.0))
    machine.started([[second.delivery_id]], 3.0)
    machine.tick(15.0)
    assert machine.retry_queue_length == 1  # the first, at 10 + 5; the second runs to 19
    assert machine.in_flight_by_consumer == {0: 2}  # the first overran; its handler runs on


def test_the_timeout_runs_from_the_handlers_start_in_start_order() -> None:
    """Timed from Deliver, messages waiting for a thread were parked as "timed out after
    1.0s (attempt 2 of 2)" without their handler ever being called.
    """
    settings = make_settings(Strategy.ROUND_ROBIN, consumers=1, max_in_flight=2, message_timeout=1)
    machine = make_machine(settings)
    first, second = deliveries(machine.messages_read([message(1), message(2)], 0, 0.0))
    assert machine.tick(100.0) == []  # neither started: neither times out
    assert machine.in_flight_by_consumer == {0: 2}
    machine.started([[second.delivery_id]], 100.0)
    machine.started([[first.delivery_id], [12345]], 100.5)  # unknown ids are ignored
    machine.tick(101.0)
    assert machine.retry_queue_length == 1  # second timed out; first runs on
    retry = only_delivery(acked(machine, first.delivery_id, 101.4))  # after its backoff
    assert (retry.envelope.position, retry.attempt) == (at(2), 2)
    assert machine.checkpoint == at(1)


def test_a_withdrawn_delivery_is_not_an_attempt() -> None:
    settings = make_settings(Strategy.ROUND_ROBIN, consumers=1, max_retry_count=1)
    machine = make_machine(settings)
    first = only_delivery(machine.messages_read([message(1), message(2)], 0, 0.0))
    again = only_delivery(withdrawn(machine, first.delivery_id, 1.0))
    assert (again.envelope.position, again.attempt) == (at(1), 1)  # not parked, not at(2)
    machine.started([[again.delivery_id]], 1.0)
    assert withdrawn(machine, again.delivery_id, 1.5) == []  # started: too late to withdraw
    assert machine.in_flight_by_consumer == {0: 1}


def test_a_delivery_sought_away_before_it_started_frees_its_consumer_only() -> None:
    machine = make_machine(make_settings(Strategy.ROUND_ROBIN, consumers=1))
    first = only_delivery(machine.messages_read([message(1)], 0, 0.0))
    machine.seek(START, 1, 1.0)
    assert withdrawn(machine, first.delivery_id, 1.5) == []
    assert machine.in_flight_by_consumer == {}
    redelivered = only_delivery(machine.messages_read([message(1)], 1, 2.0))
    assert (redelivered.epoch, redelivered.attempt) == (1, 1)


def test_an_unavailable_destination_backs_off_without_using_attempts_and_is_reported() -> None:
    settings = make_settings(
        Strategy.ROUND_ROBIN, max_retry_count=2, retry_backoff_initial=0.5, retry_backoff_max=2.0
    )
    machine = make_machine(settings)
    delivery = only_delivery(machine.messages_read([message(1)], 0, 0.0))
    now = 0.0
    # Five outages, more than max_retry_count: none counts, each backs off longer (capped).
    for deferral, delay in enumerate([0.5, 1.0, 2.0, 2.0, 2.0], start=1):
        assert unavailable(machine, delivery.delivery_id, now) == []
        assert machine.destination_problem == "broker down"
        assert machine.tick(now + delay - 0.01) == [], deferral
        now += delay
        delivery = only_delivery(machine.tick(now))
        assert delivery.attempt == 1
    written = [*acked(machine, delivery.delivery_id, now), machine.final_checkpoint()]
    assert machine.destination_problem is None
    assert WriteCheckpoint(at(1), 0) in written
