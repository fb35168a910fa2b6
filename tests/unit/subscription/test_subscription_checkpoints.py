"""Checkpoint batching, shutdown, seeks, and replays that must not touch the checkpoint."""

import pytest

from poller.subscription import (
    START,
    Envelope,
    Park,
    Position,
    ReplayDone,
    Strategy,
    WriteCheckpoint,
)
from tests.unit.subscription.support import (
    at,
    deliveries,
    key_owned_by,
    make_machine,
    make_settings,
    message,
    only_delivery,
)


def test_checkpoint_is_written_after_checkpoint_after_seconds_once_min_count_finished() -> None:
    settings = make_settings(
        Strategy.ROUND_ROBIN,
        consumers=1,
        max_in_flight=10,
        checkpoint_after=2.0,
        min_checkpoint_count=3,
        max_checkpoint_count=5,
    )
    machine = make_machine(settings, now=0.0)
    commands = machine.messages_read([message(n) for n in range(1, 11)], 0, 0.0)
    ids = [delivery.delivery_id for delivery in deliveries(commands)]
    assert machine.acked(ids[0], 1.0) == []
    assert machine.acked(ids[1], 1.0) == []
    assert machine.acked(ids[2], 1.0) == []  # 3 finished, but only 1 s since the start
    assert machine.tick(1.99) == []
    assert machine.tick(2.0) == [WriteCheckpoint(at(3))]

    # max_checkpoint_count finished: written at once, without waiting for the time rule,
    # but only after the previous write is confirmed (one write outstanding at a time).
    for delivery_id in ids[3:8]:
        assert machine.acked(delivery_id, 2.5) == []
    assert machine.checkpoint_written(at(3), 2.5) == [WriteCheckpoint(at(8))]
    assert machine.written_checkpoint == at(3)
    machine.checkpoint_written(at(8), 2.6)
    assert machine.written_checkpoint == at(8)


def test_fewer_than_min_count_finished_waits_for_shutdown() -> None:
    settings = make_settings(Strategy.ROUND_ROBIN, min_checkpoint_count=3, max_checkpoint_count=5)
    machine = make_machine(settings)
    first = only_delivery(machine.messages_read([message(1)], 0, 0.0))
    assert machine.acked(first.delivery_id, 1.0) == []
    assert machine.tick(1000.0) == []
    assert machine.final_checkpoint() == WriteCheckpoint(at(1))
    assert machine.final_checkpoint() is None  # already being written


def test_checkpoint_does_not_move_for_finished_messages_behind_an_unfinished_one() -> None:
    machine = make_machine(make_settings(Strategy.ROUND_ROBIN, consumers=3))
    first, second, third = deliveries(
        machine.messages_read([message(1), message(2), message(3)], 0, 0.0)
    )
    assert machine.acked(second.delivery_id, 1.0) == []
    assert machine.acked(third.delivery_id, 1.0) == []
    assert machine.checkpoint == START
    assert machine.acked(first.delivery_id, 1.0) == [WriteCheckpoint(at(3))]


def test_seek_moves_the_checkpoint_anywhere_and_writes_it_at_once() -> None:
    machine = make_machine(make_settings(Strategy.ROUND_ROBIN))
    first = only_delivery(machine.messages_read([message(1)], 0, 0.0))
    machine.acked(first.delivery_id, 1.0)
    machine.checkpoint_written(at(1), 1.0)

    assert machine.seek(at(50), 1, 2.0) == [WriteCheckpoint(at(50))]
    assert (machine.checkpoint, machine.next_read_position) == (at(50), at(50))
    assert machine.seek(START, 2, 3.0) == [WriteCheckpoint(START)]
    assert machine.checkpoint == START
    with pytest.raises(ValueError, match="seek epoch 2 must be greater than the current epoch 2"):
        machine.seek(at(5), 2, 4.0)


def test_replayed_messages_go_first_and_never_move_the_checkpoint() -> None:
    machine = make_machine(make_settings(Strategy.ROUND_ROBIN, consumers=1))
    first = only_delivery(machine.messages_read([message(1), message(2)], 0, 0.0))
    parked = Envelope(Position(0, 7), "k", payload="parked")
    # Replaying a parked copy of a stream message: still not the stream's message.
    same_position = Envelope(at(1), None, payload="parked copy of 1")
    assert machine.replay([parked, same_position], 1.0) == []  # the consumer is busy

    commands = machine.acked(first.delivery_id, 2.0)
    replayed = only_delivery(commands)
    assert (replayed.envelope, replayed.replayed) == (parked, True)
    assert commands[-1] == WriteCheckpoint(at(1))
    machine.checkpoint_written(at(1), 2.0)

    commands = machine.acked(replayed.delivery_id, 3.0)
    assert commands[0] == ReplayDone(Position(0, 7))
    copy = only_delivery(commands)
    assert (copy.envelope.position, copy.replayed) == (at(1), True)
    assert machine.checkpoint == at(1)

    commands = machine.acked(copy.delivery_id, 4.0)
    assert commands[0] == ReplayDone(at(1))
    assert only_delivery(commands).envelope.position == at(2)
    assert machine.checkpoint == at(1)


def test_a_replay_waits_for_its_key_to_be_out_of_flight() -> None:
    key = key_owned_by(0, 1)
    machine = make_machine(make_settings(Strategy.PINNED, consumers=1, max_in_flight=3))
    first = only_delivery(machine.messages_read([message(1, key), message(2, key)], 0, 0.0))
    assert machine.replay([Envelope(Position(0, 7), key)], 1.0) == []
    # The replay goes ahead of the key's next stream message.
    replayed = only_delivery(machine.acked(first.delivery_id, 2.0))
    assert (replayed.envelope.position, replayed.replayed) == (Position(0, 7), True)


def test_a_replay_that_keeps_failing_is_parked_again() -> None:
    settings = make_settings(Strategy.ROUND_ROBIN, max_retry_count=1)
    machine = make_machine(settings)
    replayed = only_delivery(machine.replay([Envelope(Position(0, 7), None)], 0.0))
    (park,) = machine.failed(replayed.delivery_id, "still broken", 1.0)
    assert isinstance(park, Park)
    assert (park.envelope.position, park.replayed) == (Position(0, 7), True)
    assert machine.parked(Position(0, 7), 2.0) == []
    assert machine.checkpoint == START
