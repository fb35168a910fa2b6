"""Checkpoint batching, shutdown, seeks, and replays that must not touch the checkpoint."""

import pytest

from poller.subscription import (
    START,
    Command,
    Envelope,
    Park,
    Position,
    ReplayDone,
    Strategy,
    WriteCheckpoint,
)
from tests.unit.subscription.support import (
    acked,
    at,
    deliveries,
    failed,
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
    assert acked(machine, ids[0], 1.0) == []
    assert acked(machine, ids[1], 1.0) == []
    assert acked(machine, ids[2], 1.0) == []  # 3 finished, but only 1 s since the start
    assert machine.tick(1.99) == []
    assert machine.tick(2.0) == [WriteCheckpoint(at(3), 0)]

    # max_checkpoint_count finished: written at once, without waiting for the time rule,
    # but only after the previous write is confirmed (one write outstanding at a time).
    for delivery_id in ids[3:8]:
        assert acked(machine, delivery_id, 2.5) == []
    assert machine.checkpoint_written(at(3), 0, 2.5) == [WriteCheckpoint(at(8), 0)]
    assert machine.written_checkpoint == at(3)
    machine.checkpoint_written(at(8), 0, 2.6)
    assert machine.written_checkpoint == at(8)


def test_an_idle_subscription_writes_its_checkpoint_below_min_count() -> None:
    """With fewer than min_checkpoint_count finished, the checkpoint was never written while
    the daemon ran: status showed "behind 3" forever and a crash redelivered them.
    """
    settings = make_settings(
        Strategy.ROUND_ROBIN,
        consumers=1,
        max_in_flight=5,
        checkpoint_after=2.0,
        min_checkpoint_count=3,
        max_checkpoint_count=5,
    )
    machine = make_machine(settings)
    first, second = deliveries(machine.messages_read([message(1), message(2)], 0, 0.0))
    assert acked(machine, first.delivery_id, 1.0) == []
    assert machine.tick(2.5) == []
    assert acked(machine, second.delivery_id, 2.5) == []  # still busy: the idle time restarts
    assert machine.tick(4.49) == []
    assert machine.tick(4.5) == [WriteCheckpoint(at(2), 0)]
    assert machine.final_checkpoint() is None  # already being written


def test_checkpoint_does_not_move_for_finished_messages_behind_an_unfinished_one() -> None:
    machine = make_machine(make_settings(Strategy.ROUND_ROBIN, consumers=3))
    first, second, third = deliveries(
        machine.messages_read([message(1), message(2), message(3)], 0, 0.0)
    )
    assert acked(machine, second.delivery_id, 1.0) == []
    assert acked(machine, third.delivery_id, 1.0) == []
    assert machine.checkpoint == START
    assert acked(machine, first.delivery_id, 1.0) == [WriteCheckpoint(at(3), 0)]


def test_seek_moves_the_checkpoint_anywhere_and_writes_it_at_once() -> None:
    machine = make_machine(make_settings(Strategy.ROUND_ROBIN))
    first = only_delivery(machine.messages_read([message(1)], 0, 0.0))
    acked(machine, first.delivery_id, 1.0)
    machine.checkpoint_written(at(1), 0, 1.0)

    assert machine.seek(at(50), 1, 2.0) == [WriteCheckpoint(at(50), 1)]
    assert (machine.checkpoint, machine.next_read_position) == (at(50), at(50))
    assert machine.seek(START, 2, 3.0) == [WriteCheckpoint(START, 2)]
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

    commands = acked(machine, first.delivery_id, 2.0)
    replayed = only_delivery(commands)
    assert (replayed.envelope, replayed.replayed) == (parked, True)
    assert commands[-1] == WriteCheckpoint(at(1), 0)
    machine.checkpoint_written(at(1), 0, 2.0)

    commands = acked(machine, replayed.delivery_id, 3.0)
    assert commands[0] == ReplayDone(Position(0, 7), 0)
    copy = only_delivery(commands)
    assert (copy.envelope.position, copy.replayed) == (at(1), True)
    assert machine.checkpoint == at(1)

    commands = acked(machine, copy.delivery_id, 4.0)
    assert commands[0] == ReplayDone(at(1), 0)
    assert only_delivery(commands).envelope.position == at(2)
    assert machine.checkpoint == at(1)


def test_a_replay_waits_for_its_key_to_be_out_of_flight() -> None:
    key = key_owned_by(0, 1)
    machine = make_machine(make_settings(Strategy.PINNED, consumers=1, max_in_flight=3))
    first = only_delivery(machine.messages_read([message(1, key), message(2, key)], 0, 0.0))
    assert machine.replay([Envelope(Position(0, 7), key)], 1.0) == []
    # The replay goes ahead of the key's next stream message.
    replayed = only_delivery(acked(machine, first.delivery_id, 2.0))
    assert (replayed.envelope.position, replayed.replayed) == (Position(0, 7), True)


def test_a_replay_that_keeps_failing_is_parked_again() -> None:
    settings = make_settings(Strategy.ROUND_ROBIN, max_retry_count=1)
    machine = make_machine(settings)
    replayed = only_delivery(machine.replay([Envelope(Position(0, 7), None)], 0.0))
    (park,) = failed(machine, replayed.delivery_id, "still broken", 1.0)
    assert isinstance(park, Park)
    assert (park.envelope.position, park.replayed) == (Position(0, 7), True)
    # The parked row already counts the earlier attempts; the reason names this replay's own.
    assert park.reason == "still broken (replay attempt 1 of 1)"
    assert machine.parked(Position(0, 7), 0, 2.0) == []
    assert machine.checkpoint == START


def test_a_write_queued_before_a_seek_is_refused_by_its_epoch() -> None:
    """Review bug: WriteCheckpoint(P) queued in epoch e ran after a seek to `to` < P and was
    stamped with the current epoch e+1, so the store took it, the checkpoint jumped back up
    to P and (to, P] was never redelivered. Each write carries the epoch it was issued in.
    """
    machine = make_machine(make_settings(Strategy.ROUND_ROBIN, consumers=1, max_in_flight=2))
    first, second = deliveries(machine.messages_read([message(1), message(2)], 0, 0.0))
    acked(machine, first.delivery_id, 1.0)
    assert acked(machine, second.delivery_id, 1.0) == []  # at(1) is still being written
    assert machine.checkpoint_written(at(1), 0, 1.5) == [WriteCheckpoint(at(2), 0)]
    queued: list[Command] = [WriteCheckpoint(at(2), 0)]  # behind other writes in the daemon's queue

    # The operator seeks back to at(1): the store is now in epoch 1 at at(1).
    store_epoch, store_checkpoint = 1, at(1)
    queued += machine.seek(at(1), 1, 2.0)
    assert queued == [WriteCheckpoint(at(2), 0), WriteCheckpoint(at(1), 1)]
    for write in queued:
        assert isinstance(write, WriteCheckpoint)
        if write.epoch == store_epoch:
            store_checkpoint = write.position
            machine.checkpoint_written(write.position, write.epoch, 2.5)
    assert store_checkpoint == at(1)
    assert machine.written_checkpoint == at(1)

    # at(2) is delivered again in the new epoch.
    again = only_delivery(machine.messages_read([message(2)], 1, 3.0))
    assert (again.envelope.position, again.epoch) == (at(2), 1)


def test_a_late_confirmation_from_before_a_seek_is_ignored() -> None:
    machine = make_machine(make_settings(Strategy.ROUND_ROBIN, consumers=1))
    first = only_delivery(machine.messages_read([message(1), message(2)], 0, 0.0))
    second = only_delivery(
        acked(machine, first.delivery_id, 1.0)
    )  # emits WriteCheckpoint(at(1), 0)
    assert machine.seek(START, 1, 2.0) == [WriteCheckpoint(START, 1)]
    # The store took at(1) just before the seek; its confirmation arrives after it.
    assert machine.checkpoint_written(at(1), 0, 2.5) == []
    assert machine.written_checkpoint == START
    assert acked(machine, second.delivery_id, 3.0) == []  # stale: the seek dropped at(2)
    redelivered = only_delivery(machine.messages_read([message(1)], 1, 3.0))
    # Still waiting for the seek's own write: nothing else is written before it lands.
    assert acked(machine, redelivered.delivery_id, 4.0) == []
    assert machine.checkpoint_written(START, 1, 5.0) == [WriteCheckpoint(at(1), 1)]


def test_a_park_confirmed_from_before_a_seek_does_not_finish_the_new_epochs_message() -> None:
    settings = make_settings(Strategy.ROUND_ROBIN, max_retry_count=1)
    machine = make_machine(settings)
    first = only_delivery(machine.messages_read([message(1)], 0, 0.0))
    assert failed(machine, first.delivery_id, "boom", 1.0) == [
        Park(message(1), 1, "boom (attempt 1 of 1)", 0)
    ]
    machine.seek(START, 1, 2.0)
    again = only_delivery(machine.messages_read([message(1)], 1, 3.0))
    (park,) = failed(machine, again.delivery_id, "boom", 4.0)
    assert park == Park(message(1), 1, "boom (attempt 1 of 1)", 1)
    assert machine.parked(at(1), 0, 5.0) == []  # the old epoch's row: not this Park
    assert machine.checkpoint == START
    assert machine.parked(at(1), 1, 6.0) == []  # the seek's write is still outstanding
    assert machine.checkpoint == at(1)


def test_an_unfinished_replay_is_not_queued_again() -> None:
    """The daemon cleared its own set of replaying positions on a seek while the machine
    kept the replays; the next request queued the same parked rows again, and round-robin
    ran two copies of one message at once.
    """
    settings = make_settings(Strategy.ROUND_ROBIN, consumers=2, max_retry_count=2)
    machine = make_machine(settings)
    parked = Envelope(Position(0, 7), None)
    first = only_delivery(machine.replay([parked], 0.0))
    assert machine.replay([parked], 0.5) == []  # in flight; consumer 1 stays idle
    assert failed(machine, first.delivery_id, "boom", 1.0) == []
    machine.seek(START, 1, 1.0)
    assert machine.replay([parked], 1.05) == []  # backing off, and kept by the seek
    second = only_delivery(machine.tick(1.0 + settings.retry_backoff_initial))
    assert second.attempt == 2
    (park,) = failed(machine, second.delivery_id, "boom", 2.0)
    assert isinstance(park, Park)
    assert machine.replay([parked], 2.5) == []  # parking
    assert machine.parked(Position(0, 7), 1, 3.0) == []
    again = only_delivery(machine.replay([parked], 4.0))
    assert (again.envelope, again.attempt) == (parked, 1)
