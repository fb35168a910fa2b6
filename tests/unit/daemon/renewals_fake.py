"""An in-memory RenewalDatabase (poller/daemon/process/lease_renewer.py) over the fake stores,
for a real LeaseRenewer in the unit tests of the term, the worker and the coordinator.

The renewer runs on a thread and an event loop of its own; each of its statements here runs
on the test's event loop instead, where the test changes the stores (a takeover, a seek, held
renewals), as a statement runs on the server: the renewer waits for its answer.
"""

import asyncio
import time
from collections.abc import Callable, Sequence

from poller.daemon.options import DaemonOptions
from poller.daemon.process.lease_renewer import LeaseRenewer
from poller.membership import Member, ShardUnit
from poller.store.lease_renewal import HeldLease, ProcessRenewal
from poller.store.membership_store import GroupState
from tests.unit.daemon.term_store_fake import SUBSCRIPTION, FakeTermStore

Group = Callable[[bool], GroupState | None]
"""The group as a renewal finds it (given whether the process is still a member); None when
the subscription is gone."""


class FakeRenewals:
    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        store_of: Callable[[ShardUnit], FakeTermStore],
        group: Group,
        leave: Callable[[], None],
    ) -> None:
        self._loop = loop  # the test's
        self._store_of = store_of
        self._group = group
        self._leave = leave

    async def renew(self, leases: Sequence[HeldLease], *, member: bool) -> ProcessRenewal | None:
        work = asyncio.run_coroutine_threadsafe(self._renew(leases, member), self._loop)
        return await asyncio.wrap_future(work)

    async def _renew(self, leases: Sequence[HeldLease], member: bool) -> ProcessRenewal | None:
        group = self._group(member)
        if group is None:
            return None
        found = {}
        for lease in leases:
            store = self._store_of(lease.unit)
            found[lease.unit, lease.token] = await store.renew(lease.token, lease.runtime)
        return ProcessRenewal(found, group)

    async def leave(self) -> None:
        self._loop.call_soon_threadsafe(self._leave)

    async def forget_connection(self) -> None:
        pass

    async def close(self) -> None:
        pass


def started_renewer(
    store_of: Callable[[ShardUnit], FakeTermStore],
    group: Group,
    leave: Callable[[], None],
    options: DaemonOptions,
) -> LeaseRenewer:
    """A real renewer over the fake stores, started on the test's event loop."""
    loop = asyncio.get_running_loop()
    renewer = LeaseRenewer(
        lambda _stop: FakeRenewals(loop, store_of, group, leave), SUBSCRIPTION, options
    )
    renewer.start()
    return renewer


def alone(store: FakeTermStore) -> Group:
    """The group of a process alone in it."""

    def group(member: bool) -> GroupState:  # noqa: ARG001
        now = time.monotonic()
        return GroupState(store.layout, [Member(store.lease.holder, now + 60.0)], now)

    return group
