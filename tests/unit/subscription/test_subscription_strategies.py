"""Which consumer gets which message, per strategy."""

import zlib

from poller.subscription import START, Strategy, owner_of
from tests.unit.subscription.support import (
    acked,
    at,
    delivered,
    deliveries,
    failed,
    key_owned_by,
    make_machine,
    make_settings,
    message,
    only_delivery,
)


def test_round_robin_rotates_over_consumers_with_room() -> None:
    machine = make_machine(make_settings(Strategy.ROUND_ROBIN, consumers=3, max_in_flight=2))
    commands = machine.messages_read([message(n) for n in range(1, 8)], 0, 0.0)
    assert [consumer for consumer, _ in delivered(commands)] == [0, 1, 2, 0, 1, 2]
    assert machine.buffered_count == 1
    on_zero, on_one, on_two = deliveries(commands)[:3]

    commands = acked(machine, on_one.delivery_id, 1.0)
    assert delivered(commands) == [(1, at(7))]

    acked(machine, on_zero.delivery_id, 2.0)
    acked(machine, on_two.delivery_id, 2.0)
    commands = machine.messages_read([message(8), message(9)], 0, 3.0)
    # The last pick was consumer 1, so the rotation goes on with 2, then wraps to 0.
    assert delivered(commands) == [(2, at(8)), (0, at(9))]


def test_dispatch_to_single_fills_the_lowest_numbered_consumer_first() -> None:
    machine = make_machine(make_settings(Strategy.DISPATCH_TO_SINGLE, consumers=3, max_in_flight=2))
    commands = machine.messages_read([message(n) for n in range(1, 6)], 0, 0.0)
    assert [consumer for consumer, _ in delivered(commands)] == [0, 0, 1, 1, 2]
    on_zero = deliveries(commands)[0]

    acked(machine, on_zero.delivery_id, 1.0)
    commands = machine.messages_read([message(6), message(7)], 0, 2.0)
    assert delivered(commands) == [(0, at(6)), (2, at(7))]


def test_pinned_owner_is_a_stable_crc32_of_the_key() -> None:
    # Python's hash() of a str changes with every process (PYTHONHASHSEED); crc32 does not,
    # so a restarted daemon keeps sending a key to the same consumer.
    assert owner_of("customer-7", 5) == zlib.crc32(b"customer-7") % 5
    machine = make_machine(make_settings(Strategy.PINNED, consumers=5, max_in_flight=3))
    commands = machine.messages_read([message(1, "customer-7")], 0, 0.0)
    assert delivered(commands) == [(owner_of("customer-7", 5), at(1))]


def test_pinned_keeps_one_message_per_key_in_flight_in_position_order() -> None:
    key = key_owned_by(0, 1)
    machine = make_machine(make_settings(Strategy.PINNED, consumers=1, max_in_flight=5))
    commands = machine.messages_read([message(1, key), message(2, key), message(3)], 0, 0.0)
    # The keyless message is not held back by the busy key.
    assert delivered(commands) == [(0, at(1)), (0, at(3))]
    first = deliveries(commands)[0]
    commands = acked(machine, first.delivery_id, 1.0)
    assert delivered(commands) == [(0, at(2))]


def test_pinned_failed_head_blocks_its_key_until_retried_and_acked() -> None:
    key = key_owned_by(0, 1)
    settings = make_settings(Strategy.PINNED, consumers=1, max_in_flight=5)
    machine = make_machine(settings)
    first = only_delivery(machine.messages_read([message(1, key), message(2, key)], 0, 0.0))

    assert failed(machine, first.delivery_id, "boom", 1.0) == []  # 2 waits behind 1
    assert machine.tick(1.0 + settings.retry_backoff_initial / 2) == []
    retry = only_delivery(machine.tick(1.0 + settings.retry_backoff_initial))
    assert (retry.envelope.position, retry.attempt) == (at(1), 2)

    commands = acked(machine, retry.delivery_id, 2.0)
    assert delivered(commands) == [(0, at(2))]


def test_pinned_passes_a_full_owner_for_other_keys_and_keeps_the_checkpoint() -> None:
    busy_key = key_owned_by(0, 2)
    waiting_key = key_owned_by(0, 2, not_in=(busy_key,))
    free_key = key_owned_by(1, 2)
    machine = make_machine(make_settings(Strategy.PINNED, consumers=2, max_in_flight=1))
    commands = machine.messages_read(
        [message(1, busy_key), message(2, waiting_key), message(3, free_key)], 0, 0.0
    )
    assert delivered(commands) == [(0, at(1)), (1, at(3))]
    assert acked(machine, deliveries(commands)[1].delivery_id, 1.0) == []
    assert machine.checkpoint == START


def test_pinned_keyless_messages_go_round_robin() -> None:
    machine = make_machine(make_settings(Strategy.PINNED, consumers=3, max_in_flight=2))
    commands = machine.messages_read([message(n) for n in range(1, 5)], 0, 0.0)
    assert [consumer for consumer, _ in delivered(commands)] == [0, 1, 2, 0]


def test_consumer_change_drains_a_key_before_its_new_owner_gets_it() -> None:
    key = next(f"k{n}" for n in range(1000) if owner_of(f"k{n}", 1) != owner_of(f"k{n}", 2))
    machine = make_machine(make_settings(Strategy.PINNED, consumers=1, max_in_flight=2))
    first = only_delivery(machine.messages_read([message(1, key), message(2, key)], 0, 0.0))

    assert machine.consumer_count_changed(2, 1.0) == []
    assert machine.draining_keys == frozenset({key})
    commands = failed(machine, first.delivery_id, "boom", 2.0)
    assert commands == []
    assert machine.draining_keys == frozenset()
    retry = only_delivery(machine.tick(3.0))
    assert (retry.consumer, retry.envelope.position) == (owner_of(key, 2), at(1))


def test_deliveries_on_a_removed_consumer_still_count_when_acked() -> None:
    machine = make_machine(make_settings(Strategy.ROUND_ROBIN, consumers=2, max_in_flight=1))
    first, second = deliveries(machine.messages_read([message(1), message(2)], 0, 0.0))
    assert second.consumer == 1
    machine.consumer_count_changed(1, 1.0)
    assert machine.in_flight_by_consumer == {0: 1, 1: 1}
    acked(machine, first.delivery_id, 2.0)
    acked(machine, second.delivery_id, 2.0)
    assert machine.checkpoint == at(2)
    commands = machine.messages_read([message(3), message(4)], 0, 3.0)
    assert delivered(commands) == [(0, at(3))]  # consumer 1 is gone


def test_one_consumer_with_one_slot_delivers_strictly_in_order_across_retries() -> None:
    """README: "1 consumer x 1 in flight delivers strictly in order"; after a retry, message
    6 was handled before message 5's second attempt.
    """
    settings = make_settings(Strategy.ROUND_ROBIN, consumers=1, max_in_flight=1)
    machine = make_machine(settings)
    five = only_delivery(machine.messages_read([message(5), message(6)], 0, 0.0))
    assert failed(machine, five.delivery_id, "boom", 1.0) == []  # 6 waits for 5
    again = only_delivery(machine.tick(1.0 + settings.retry_backoff_initial))
    assert (again.envelope.position, again.attempt) == (at(5), 2)
    six = only_delivery(acked(machine, again.delivery_id, 2.0))
    assert six.envelope.position == at(6)


def test_the_strict_order_follows_consumer_count_changes() -> None:
    settings = make_settings(Strategy.DISPATCH_TO_SINGLE, consumers=1, max_in_flight=1)
    machine = make_machine(settings)
    first = only_delivery(machine.messages_read([message(1), message(2), message(3)], 0, 0.0))
    assert failed(machine, first.delivery_id, "boom", 1.0) == []
    commands = machine.consumer_count_changed(2, 1.01)
    assert delivered(commands) == [(0, at(2)), (1, at(3))]
    second, third = deliveries(commands)
    assert delivered(machine.consumer_count_changed(1, 1.02)) == []
    # 2 and 3 run on; once they are done, 1's retry goes first and holds 4 back.
    assert machine.messages_read([message(4)], 0, 1.03) == []
    assert acked(machine, third.delivery_id, 1.04) == []
    retry = only_delivery(acked(machine, second.delivery_id, 1.2))
    assert (retry.envelope.position, retry.attempt) == (at(1), 2)
    assert failed(machine, retry.delivery_id, "boom", 1.3) == []
    assert machine.tick(1.35) == []  # 4 waits for 1's third attempt
