"""admin_skip_to: everything at or before a position is finished without delivery, nothing
after it is touched (what `outbox skip --to` asks of a running leader)."""

from poller.subscription import START, Strategy, WriteCheckpoint
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


def test_unread_messages_up_to_the_target_are_never_delivered() -> None:
    machine = make_machine(make_settings(Strategy.ROUND_ROBIN, consumers=1))
    assert machine.admin_skip_to(at(5), 1.0) == []
    assert (machine.next_read_position, machine.checkpoint) == (at(5), at(5))
    # Nothing finished, so the write waits for the idle rule (checkpoint_after).
    assert machine.tick(2.0) == [WriteCheckpoint(at(5), 0)]
    # A read that began before the skip returns rows from the start: those up to the target
    # are dropped, the rest delivered.
    commands = machine.messages_read([message(n) for n in range(1, 8)], 0, 2.0)
    assert delivered(commands) == [(0, at(6))]
    assert machine.next_read_position == at(7)


def test_messages_after_the_target_keep_their_deliveries_unlike_a_seek() -> None:
    machine = make_machine(make_settings(Strategy.ROUND_ROBIN, consumers=1, max_in_flight=3))
    commands = machine.messages_read([message(n) for n in range(1, 5)], 0, 0.0)
    first, second, third = (d.delivery_id for d in deliveries(commands))
    assert machine.admin_skip_to(at(2), 1.0) == [WriteCheckpoint(at(2), 0)]
    machine.checkpoint_written(at(2), 0, 1.0)
    assert machine.epoch == 0  # a seek would raise it and deliver 3 again
    # 1's late ack frees its slot for 4 and finishes nothing; 3's ack still counts.
    commands = acked(machine, first, 2.0)
    assert delivered(commands) == [(0, at(4))]
    assert machine.checkpoint == at(2)
    assert WriteCheckpoint(at(3), 0) in acked(machine, third, 3.0)
    assert delivered(acked(machine, second, 4.0)) == []
    assert machine.checkpoint == at(3)  # 4 is in flight


def test_a_message_backing_off_at_or_before_the_target_is_never_retried() -> None:
    machine = make_machine(
        make_settings(Strategy.ROUND_ROBIN, consumers=1, retry_backoff_initial=1.0)
    )
    delivery = only_delivery(machine.messages_read([message(1), message(2)], 0, 0.0))
    assert delivered(failed(machine, delivery.delivery_id, "boom", 0.5)) == []  # 1 backs off
    assert machine.retry_queue_length == 1
    commands = machine.admin_skip_to(at(1), 0.6)
    assert delivered(commands) == [(0, at(2))]  # strict order: 2 waited behind 1
    assert delivered(machine.tick(5.0)) == []
    assert machine.retry_queue_length == 0


def test_skipping_behind_the_checkpoint_or_twice_changes_nothing() -> None:
    machine = make_machine(make_settings(Strategy.ROUND_ROBIN, consumers=1))
    delivery = only_delivery(machine.messages_read([message(1), message(2)], 0, 0.0))
    acked(machine, delivery.delivery_id, 1.0)
    machine.checkpoint_written(at(1), 0, 1.0)
    before = (machine.checkpoint, machine.next_read_position, machine.buffered_count)
    assert machine.admin_skip_to(START, 2.0) == []
    assert machine.admin_skip_to(at(1), 2.0) == []
    assert (machine.checkpoint, machine.next_read_position, machine.buffered_count) == before


def test_a_seek_forgets_the_skip_so_its_epoch_reads_everything_again() -> None:
    machine = make_machine(make_settings(Strategy.ROUND_ROBIN, consumers=1))
    machine.admin_skip_to(at(5), 1.0)
    machine.seek(START, 1, 2.0)
    commands = machine.messages_read([message(n) for n in range(1, 4)], 1, 3.0)
    assert delivered(commands) == [(0, at(1))]


def test_pinned_key_waits_for_its_skipped_delivery_then_gets_the_next_message() -> None:
    machine = make_machine(make_settings(Strategy.PINNED, consumers=2, max_in_flight=2))
    key = key_owned_by(0, 2)
    commands = machine.messages_read([message(1, key), message(2, key), message(3, key)], 0, 0.0)
    running = only_delivery(commands)
    assert delivered(machine.admin_skip_to(at(2), 1.0)) == []  # 3 waits for 1's delivery
    assert delivered(acked(machine, running.delivery_id, 2.0)) == [(0, at(3))]
