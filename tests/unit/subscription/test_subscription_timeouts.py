"""message_timeout: a handler call past its deadline fails its message there, but keeps its
consumer's slot and its key until it returns; an outcome is judged by when its call ended;
a batch call of n deliveries gets n timeouts."""

from poller.subscription import (
    Outcome,
    OutcomeKind,
    Park,
    Strategy,
    SubscriptionMachine,
    WriteCheckpoint,
)
from tests.unit.subscription.support import (
    acked,
    at,
    delivered,
    deliveries,
    make_settings,
    message,
    only_delivery,
)

ACKED = OutcomeKind.ACKED


def withdraw(machine: SubscriptionMachine, ids: list[int], now: float) -> list[object]:
    return list(machine.finished([Outcome(i, OutcomeKind.WITHDRAWN) for i in ids], now))


def test_one_slot_waits_for_a_hung_handler_then_retries_it_before_the_rest() -> None:
    """Strict order: nothing is queued behind a call that overran; when it returns, its
    retry goes first. The machine used to free the slot at the deadline and hand the rest
    to it, behind the hung call, and the retry after them."""
    settings = make_settings(Strategy.ROUND_ROBIN, consumers=1, message_timeout=0.5)
    machine = SubscriptionMachine(settings, now=0.0, prefetch=4)
    run = deliveries(machine.messages_read([message(n) for n in range(1, 5)], 0, 0.0))
    assert [d.envelope.position for d in run] == [at(1), at(2), at(3), at(4)]
    machine.started([[run[0].delivery_id]], 0.0)

    assert machine.tick(0.5) == []
    # The daemon hands back what waited behind the hung call: none of it goes out again.
    assert withdraw(machine, [d.delivery_id for d in run[1:]], 0.52) == []
    assert machine.tick(5.0) == []
    assert machine.in_flight_by_consumer == {0: 1}

    late = Outcome(run[0].delivery_id, ACKED, "", 8.0)
    again = deliveries(machine.finished([late], 8.0))
    assert [(d.envelope.position, d.attempt) for d in again] == [
        (at(1), 2),
        (at(2), 1),
        (at(3), 1),
        (at(4), 1),
    ]


def test_the_retry_of_a_hung_handler_goes_to_another_consumer() -> None:
    settings = make_settings(Strategy.ROUND_ROBIN, consumers=2, message_timeout=0.5)
    machine = SubscriptionMachine(settings, now=0.0)
    first = only_delivery(machine.messages_read([message(1)], 0, 0.0))
    assert first.consumer == 0
    machine.started([[first.delivery_id]], 0.0)
    machine.tick(0.5)
    retry = only_delivery(machine.tick(0.5 + settings.retry_backoff_initial))
    assert (retry.consumer, retry.attempt) == (1, 2)
    assert machine.in_flight_by_consumer == {0: 1, 1: 1}
    assert machine.messages_read([message(2)], 0, 1.0) == []  # both consumers busy
    assert delivered(acked(machine, first.delivery_id, 2.0)) == [(0, at(2))]  # late: frees 0


def test_a_pinned_key_stays_held_until_the_overrunning_call_returns() -> None:
    settings = make_settings(
        Strategy.PINNED, consumers=1, max_in_flight=2, message_timeout=0.5, max_retry_count=3
    )
    machine = SubscriptionMachine(settings, now=0.0)
    first = only_delivery(machine.messages_read([message(n, "k") for n in range(1, 5)], 0, 0.0))
    machine.started([[first.delivery_id]], 0.0)
    assert machine.tick(0.5) == []
    assert machine.tick(3.0) == []  # the retry is due, but attempt 1 still runs
    assert machine.draining_keys == frozenset()
    assert machine.in_flight_by_consumer == {0: 1}

    retry = only_delivery(acked(machine, first.delivery_id, 3.1))  # late: no more than that
    assert (retry.envelope.position, retry.attempt) == (at(1), 2)
    assert delivered(acked(machine, retry.delivery_id, 3.2)) == [(0, at(2))]


def test_an_outcome_is_judged_by_when_its_call_ended_not_when_it_is_reported() -> None:
    """A 0.296 s handler under a 0.3 s timeout, reported at the next tick, counted as timed
    out, and its retry ran after the messages behind it."""
    settings = make_settings(Strategy.ROUND_ROBIN, consumers=1, message_timeout=0.3)
    machine = SubscriptionMachine(settings, now=0.0, prefetch=2)
    first, second = deliveries(machine.messages_read([message(1), message(2)], 0, 0.0))
    machine.started([[first.delivery_id]], 0.0)
    commands = machine.finished([Outcome(first.delivery_id, ACKED, "", 0.296)], 0.31)
    assert commands == [WriteCheckpoint(at(1), 0)]
    assert machine.retry_queue_length == 0

    # Reported after the deadline fired in another event: the ack still stands.
    machine.started([[second.delivery_id]], 0.31)
    machine.tick(0.62)
    assert machine.retry_queue_length == 1
    machine.finished([Outcome(second.delivery_id, ACKED, "", 0.6)], 0.63)
    assert machine.checkpoint == at(2)
    assert machine.retry_queue_length == 0
    assert machine.in_flight_by_consumer == {}


def test_an_outcome_that_ended_at_its_deadline_is_a_timeout() -> None:
    settings = make_settings(Strategy.ROUND_ROBIN, consumers=1, message_timeout=0.3)
    machine = SubscriptionMachine(settings, now=0.0)
    first = only_delivery(machine.messages_read([message(1)], 0, 0.0))
    machine.started([[first.delivery_id]], 0.0)
    assert machine.finished([Outcome(first.delivery_id, ACKED, "", 0.3)], 0.31) == []
    assert machine.retry_queue_length == 1
    assert machine.in_flight_by_consumer == {}  # the call returned: nothing holds the slot


def test_a_batch_call_gets_message_timeout_per_message_and_holds_one_slot() -> None:
    """100 messages at 5 ms each under a 0.3 s timeout were all parked "timed out"."""
    settings = make_settings(
        Strategy.ROUND_ROBIN, consumers=1, max_in_flight=2, message_timeout=0.3, max_retry_count=1
    )
    machine = SubscriptionMachine(settings, now=0.0, prefetch=100)
    batch = deliveries(machine.messages_read([message(n) for n in range(1, 101)], 0, 0.0))
    machine.started([[d.delivery_id for d in batch]], 0.0)
    assert machine.tick(29.9) == []

    parks = machine.tick(30.0)
    assert len(parks) == 100
    assert all(isinstance(park, Park) for park in parks)
    reason = parks[0].reason  # type: ignore[union-attr]
    assert "timed out after 30s (a batch of 100, 0.3s a message)" in reason
    # The hung batch fills one slot of the two: the other takes a batch's worth, no more.
    more = machine.messages_read([message(n) for n in range(101, 251)], 0, 30.1)
    assert len(deliveries(more)) == 100
    assert machine.in_flight_by_consumer == {0: 200}
    rest = machine.finished([Outcome(d.delivery_id, ACKED, "", 31.0) for d in batch], 31.0)
    assert len(deliveries(rest)) == 50  # the slot is free again


def test_a_batch_that_returns_in_time_is_acked() -> None:
    settings = make_settings(Strategy.ROUND_ROBIN, consumers=1, message_timeout=0.3)
    machine = SubscriptionMachine(settings, now=0.0, prefetch=100)
    batch = deliveries(machine.messages_read([message(n) for n in range(1, 101)], 0, 0.0))
    machine.started([[d.delivery_id for d in batch]], 0.0)
    outcomes = [Outcome(d.delivery_id, ACKED, "", 0.5) for d in batch]
    assert machine.finished(outcomes, 0.52) == [WriteCheckpoint(at(100), 0)]
