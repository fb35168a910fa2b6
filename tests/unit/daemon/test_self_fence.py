"""When a leader may start deliveries (poller/daemon/term/self_fence.py), with the clock given."""

from poller.daemon.term.self_fence import SelfFence


def fence(previous_lease_left: float, earlier_not_before: float = 0.0) -> SelfFence:
    return SelfFence.acquired(
        lease_seconds=4.0,
        margin=1.0,
        sent_at=100.0,
        received_at=100.1,
        previous_lease_left=previous_lease_left,
        earlier_not_before=earlier_not_before,
    )


def test_a_takeover_waits_out_the_previous_lease_and_stops_a_margin_before_its_own() -> None:
    taken = fence(previous_lease_left=1.5)
    assert not taken.may_start(101.5)
    assert taken.wait_before_start(101.5) == 101.6 - 101.5
    assert taken.may_start(101.6)
    assert not taken.may_start(103.0)  # sent_at + lease_seconds - margin


def test_re_taking_its_own_lease_keeps_the_wait_of_the_takeover_before_it() -> None:
    """The server says 0 s left of a lease that is the process's own; the takeover a moment
    before was still waiting out another process's lease, whose calls may still run."""
    first = fence(previous_lease_left=1.5)
    again = fence(previous_lease_left=0.0, earlier_not_before=first.not_before)
    assert not again.may_start(101.0)
    assert again.may_start(first.not_before)
