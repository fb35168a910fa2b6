"""The read side: batch validation, epochs, and how much the buffer wants."""

import pytest

from poller.subscription import START, Envelope, Position, Strategy
from tests.unit.subscription.support import at, make_machine, make_settings, message


def test_reads_must_ascend_past_everything_read_and_are_rejected_whole() -> None:
    machine = make_machine(make_settings(Strategy.ROUND_ROBIN))
    machine.messages_read([message(1), message(2)], 0, 0.0)
    with pytest.raises(ValueError, match="read position 1:2 is not after 1:3"):
        machine.messages_read([message(3), message(2)], 0, 1.0)
    with pytest.raises(ValueError, match="read position 1:2 is not after 1:2"):
        machine.messages_read([message(2)], 0, 1.0)
    assert machine.next_read_position == at(2)
    assert machine.buffered_count == 0


def test_positions_compare_by_transaction_id_first() -> None:
    machine = make_machine(make_settings(Strategy.ROUND_ROBIN))
    machine.messages_read([Envelope(Position(999, 900), None)], 0, 0.0)
    # Positions are handed out at insert: a later transaction may carry a smaller one.
    machine.messages_read([Envelope(Position(1000, 5), None)], 0, 1.0)
    assert machine.next_read_position == Position(1000, 5)
    with pytest.raises(ValueError, match="read position 999:901 is not after 1000:5"):
        machine.messages_read([Envelope(Position(999, 901), None)], 0, 2.0)


def test_a_read_from_a_future_epoch_is_a_bug() -> None:
    machine = make_machine(make_settings(Strategy.ROUND_ROBIN))
    with pytest.raises(ValueError, match="read epoch 1 is ahead of the current epoch 0"):
        machine.messages_read([message(1)], 1, 0.0)


def test_read_wanted_is_the_room_left_in_the_buffer() -> None:
    machine = make_machine(
        make_settings(Strategy.ROUND_ROBIN, consumers=1, max_in_flight=2, buffer_size=5)
    )
    assert machine.read_wanted() == 5
    assert (machine.next_read_position, machine.checkpoint) == (START, START)
    machine.messages_read([message(n) for n in range(1, 5)], 0, 0.0)
    assert machine.buffered_count == 2  # two of the four are in flight
    assert machine.read_wanted() == 3
    machine.messages_read([message(n) for n in range(5, 12)], 0, 0.0)
    assert machine.read_wanted() == 0  # over-full, never negative


@pytest.mark.parametrize("consumers", [0, 1025, 2147483648])
def test_consumer_count_change_is_bounded_like_the_setting(consumers: int) -> None:
    machine = make_machine(make_settings(Strategy.ROUND_ROBIN))
    with pytest.raises(
        ValueError, match=f"consumers must be an integer from 1 to 1024, got {consumers}"
    ):
        machine.consumer_count_changed(consumers, 0.0)
