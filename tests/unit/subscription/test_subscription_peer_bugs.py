"""The three peer bugs this design avoids, reproduced step by step."""

import pytest

from poller.subscription import (
    START,
    Envelope,
    Position,
    ReplayDone,
    Strategy,
    SubscriptionMachine,
    WriteCheckpoint,
    owner_of,
)
from tests.unit.subscription.support import (
    acked,
    at,
    delivered,
    deliveries,
    key_owned_by,
    make_machine,
    make_settings,
    message,
    only_delivery,
)


def test_kurrentdb_5497_pinned_skip_keeps_checkpoint_below_skipped_message() -> None:
    """KurrentDB #5497: a message the pinned strategy skipped (its owner was full) was left
    out of the checkpoint computation, so acking later messages moved the checkpoint past
    it, and a crash before it was delivered lost it.
    """
    settings = make_settings(Strategy.PINNED, consumers=2, max_in_flight=1)
    machine = make_machine(settings)
    busy_key = key_owned_by(0, 2)
    skipped_key = key_owned_by(0, 2, not_in=(busy_key,))
    other_key = key_owned_by(1, 2)

    # A replayed parked message goes first and fills consumer 0.
    replayed = only_delivery(machine.replay([Envelope(Position(0, 9), busy_key)], 0.0))
    commands = machine.messages_read([message(1, skipped_key), message(2, other_key)], 0, 0.0)
    passing = only_delivery(commands)  # 1 is skipped (owner full); 2 goes past it
    assert (passing.consumer, passing.envelope.position) == (1, at(2))
    assert machine.buffered_count == 1

    assert acked(machine, passing.delivery_id, 1.0) == []  # no WriteCheckpoint(at(2))
    assert machine.checkpoint == START

    # A crash now restarts from the stored checkpoint, and 1 is read and delivered again.
    restarted = SubscriptionMachine(settings, now=1.5, start=machine.written_checkpoint)
    commands = restarted.messages_read([message(1, skipped_key), message(2, other_key)], 0, 1.5)
    assert delivered(commands) == [(0, at(1)), (1, at(2))]

    commands = acked(machine, replayed.delivery_id, 2.0)
    assert commands[0] == ReplayDone(Position(0, 9), 0)
    skipped = only_delivery(commands)
    assert (skipped.consumer, skipped.envelope.position) == (0, at(1))
    assert acked(machine, skipped.delivery_id, 3.0) == [WriteCheckpoint(at(2), 0)]


@pytest.mark.parametrize("move", ["checkpoint_written", "seek", "admin_skip", "admin_skip_to"])
def test_pulsar_25627_checkpoint_move_does_not_release_draining_key(move: str) -> None:
    """Pulsar #25627: moving the mark-delete position (a checkpoint move, a seek, an admin
    skip) dropped pending acks and released draining keys, so a key's next message went to
    its new owner while the old owner was still handling the previous one.
    """
    key = next(f"k{n}" for n in range(1000) if owner_of(f"k{n}", 2) != owner_of(f"k{n}", 3))
    old_owner, new_owner = owner_of(key, 2), owner_of(key, 3)
    other = key_owned_by(1 - old_owner, 2)
    machine = make_machine(make_settings(Strategy.PINNED, consumers=2, max_in_flight=2))

    commands = machine.messages_read([message(1, other), message(2, key), message(3, key)], 0, 0.0)
    assert delivered(commands) == [(1 - old_owner, at(1)), (old_owner, at(2))]
    other_delivery, key_delivery = (d.delivery_id for d in deliveries(commands))

    assert machine.consumer_count_changed(3, 1.0) == []
    assert machine.draining_keys == frozenset({key})

    if move == "checkpoint_written":
        commands = acked(machine, other_delivery, 2.0)
        assert commands == [WriteCheckpoint(at(1), 0)]
        commands = machine.checkpoint_written(at(1), 0, 2.0)
    elif move == "seek":
        commands = machine.seek(START, 1, 2.0)
        commands += machine.messages_read([message(2, key), message(3, key)], 1, 2.0)
    elif move == "admin_skip":
        commands = machine.admin_skip(at(2), 2.0)
        assert machine.checkpoint == START  # at(1) is still in flight
    else:
        commands = machine.admin_skip_to(at(2), 2.0)
        assert machine.checkpoint == at(2)  # at(1) and at(2) skipped, their deliveries run on
    assert delivered(commands) == []  # the key is still draining on its old owner
    assert machine.draining_keys == frozenset({key})

    commands = acked(machine, key_delivery, 3.0)
    expected = at(2) if move == "seek" else at(3)  # the seek re-read at(2)
    assert delivered(commands) == [(new_owner, expected)]
    assert machine.draining_keys == frozenset()


def test_pulsar_pip84_seek_drops_reads_and_acks_from_before_the_seek() -> None:
    """Pulsar PIP-84: without a consumer epoch, messages read before a seek were delivered
    after it, and acks of deliveries from before it moved the position.
    """
    machine = make_machine(make_settings(Strategy.ROUND_ROBIN, consumers=1, max_in_flight=1))
    commands = machine.messages_read([message(1), message(2), message(3)], 0, 0.0)
    first = only_delivery(commands).delivery_id
    commands = acked(machine, first, 1.0)
    second = only_delivery(commands).delivery_id
    assert commands[-1] == WriteCheckpoint(at(1), 0)
    machine.checkpoint_written(at(1), 0, 1.0)

    # Seek back to the start while 2 is in flight and 3 is buffered.
    assert machine.seek(START, 1, 2.0) == [WriteCheckpoint(START, 1)]
    assert (machine.checkpoint, machine.next_read_position, machine.epoch) == (START, START, 1)
    assert machine.buffered_count == 0

    # A read that started before the seek arrives late: ignored, nothing delivered.
    assert machine.messages_read([message(4)], 0, 2.5) == []
    assert machine.next_read_position == START

    # The old delivery's ack frees the consumer but neither finishes nor checkpoints.
    assert acked(machine, second, 3.0) == []
    assert machine.checkpoint == START

    commands = machine.messages_read([message(1), message(2)], 1, 4.0)
    delivery = only_delivery(commands)
    assert (delivery.envelope.position, delivery.epoch, delivery.attempt) == (at(1), 1, 1)
    assert machine.checkpoint == START
