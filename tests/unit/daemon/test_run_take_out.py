"""Run.take_out: an operator skip withdraws the deliveries of a run its handler has not
reached, while the handler's thread keeps claiming the others."""

import datetime
import threading

from poller.daemon.runs import Run
from poller.message import Message
from poller.subscription import Deliver, Envelope


def deliveries(count: int) -> list[Deliver]:
    commands = []
    for n in range(1, count + 1):
        message = Message(
            position=n,
            transaction_id=7,
            publication="p",
            message_id=f"m{n}",
            message_type="T",
            partition_key=None,
            data_text="{}",
            headers_text="{}",
            appended_at=datetime.datetime.now(datetime.UTC),
        )
        commands.append(Deliver(0, Envelope(message.at, None, message), 1, 0, n))
    return commands


def always(_command: Deliver) -> bool:
    return True


def skipped(command: Deliver) -> bool:
    return command.envelope.position.position <= 30


def test_take_out_leaves_started_deliveries_and_the_rest_of_the_run_in_order() -> None:
    run = Run(deliveries(40), 30.0)
    first = run.claim(always)
    assert first is not None
    assert first.delivery_id == 1
    taken = [command.delivery_id for command in run.take_out(skipped)]
    assert taken == list(range(2, 31))
    rest = []
    while (command := run.claim(always)) is not None:
        rest.append(command.delivery_id)
    assert rest == list(range(31, 41))
    assert run.take_out(skipped) == []


def test_no_delivery_is_both_started_and_taken_out_when_a_skip_races_the_run() -> None:
    for _ in range(200):
        run = Run(deliveries(50), 30.0)
        started: list[int] = []
        go = threading.Event()

        def claim_all_it_can(
            run: Run = run, started: list[int] = started, go: threading.Event = go
        ) -> None:
            go.wait()
            while (command := run.claim(always)) is not None:
                started.append(command.delivery_id)

        thread = threading.Thread(target=claim_all_it_can)
        thread.start()
        go.set()
        taken = [command.delivery_id for command in run.take_out(skipped)]
        thread.join()
        assert sorted(started + taken) == list(range(1, 51))
        assert set(range(31, 51)) <= set(started), "a delivery after the skip was lost"
        assert started == sorted(started), "the run's order changed"
