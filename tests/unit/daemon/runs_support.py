"""Deliveries and a racing handler thread for the tests of runs (claim, cut, take_out)."""

import datetime
import threading
from collections.abc import Callable

from poller.daemon.delivery.runs import Run
from poller.message import Message
from poller.subscription import Deliver, Envelope


def deliveries(count: int, attempt: int = 1) -> list[Deliver]:
    """Deliveries 1..count of keyless messages at positions 1..count."""
    commands = []
    for n in range(1, count + 1):
        message = Message(
            position=n,
            transaction_id=7,
            publication="p",
            message_id=f"m{n}",
            message_type="T",
            partition_key=None,
            data_text=f'{{"n": {n}}}',
            headers_text="{}",
            appended_at=datetime.datetime.now(datetime.UTC),
        )
        commands.append(Deliver(0, Envelope(message.at, None, message), attempt, 0, n))
    return commands


def always(_command: Deliver) -> bool:
    return True


def race_claims_against(hand_back: Callable[[Run], list[Deliver]]) -> None:
    """A handler thread claims a run's deliveries while the loop hands some back: every
    delivery must end up either started or handed back, never both, never neither."""
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
        handed_back = [command.delivery_id for command in hand_back(run)]
        thread.join()
        assert sorted(started + handed_back) == list(range(1, 51))
