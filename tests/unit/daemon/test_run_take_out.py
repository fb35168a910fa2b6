"""Run.take_out: an operator skip withdraws the deliveries of a run its handler has not
reached, while the handler's thread keeps claiming the others."""

from poller.daemon.delivery.runs import Run
from poller.subscription import Deliver
from tests.unit.daemon.runs_support import always, deliveries, race_claims_against


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
    race_claims_against(lambda run: run.take_out(skipped))
