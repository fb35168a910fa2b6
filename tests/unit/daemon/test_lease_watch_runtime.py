"""The runtime figures a term's renewals write (LeaseWatch): the newest given, written once,
and written again when a checkpoint's statement, on another connection, may have committed
before a renewal that carried older ones. Stale figures showed a destination unavailable,
or removed consumers still busy, for a renewal interval or for good."""

import time

from poller.daemon.term.lease_watch import LeaseWatch
from poller.daemon.term.self_fence import SelfFence
from poller.store.records import Lease


def watch() -> LeaseWatch:
    now = time.monotonic()
    fence = SelfFence.acquired(
        lease_seconds=3.0, margin=1.0, sent_at=now, received_at=now, previous_lease_left=0.0
    )
    return LeaseWatch(Lease("sub", "holder", 3.0, token=1), fence)


def figures(in_flight: int) -> dict[str, int]:
    return {"in_flight": in_flight}


async def test_figures_given_are_written_once_and_unchanged_ones_not_again() -> None:
    lease = watch()
    lease.give_runtime(figures(3))
    sent = lease.runtime_to_write()
    assert sent == figures(3)
    lease.renewed_on_thread(time.monotonic(), sent)
    assert lease.runtime_to_write() is None
    lease.give_runtime(figures(3))  # the term's next tick, nothing changed
    assert lease.runtime_to_write() is None
    lease.give_runtime(figures(1))
    assert lease.runtime_to_write() == figures(1)


async def test_figures_given_while_a_renewal_is_out_wait_for_the_next_one() -> None:
    lease = watch()
    lease.give_runtime(figures(3))
    sent = lease.runtime_to_write()
    lease.give_runtime(figures(1))
    lease.renewed_on_thread(time.monotonic(), sent)
    assert lease.runtime_to_write() == figures(1)


async def test_a_checkpoint_that_wrote_the_newest_spares_the_renewal() -> None:
    lease = watch()
    lease.give_runtime(figures(6))
    lease.runtime_written(figures(2))
    assert lease.runtime_to_write() is None
    lease.give_runtime(figures(2))  # what the checkpoint wrote: nothing to write
    assert lease.runtime_to_write() is None


async def test_a_renewal_with_older_figures_than_a_checkpoint_wrote_is_followed_by_the_newest() -> (
    None
):
    lease = watch()
    lease.give_runtime(figures(6))
    sent = lease.runtime_to_write()  # the renewer's thread sends it...
    lease.runtime_written(figures(2))  # ...a checkpoint writes newer ones, and may commit first
    lease.renewed_on_thread(time.monotonic(), sent)
    assert lease.runtime_to_write() == figures(2)
