"""An in-memory SubscriptionDatabase (poller/daemon/process/subscription_database.py) for the
worker's and the coordinator's unit tests.

It holds what their statements touch in PostgreSQL for one subscription: whether it exists,
its layout, the members of its group, and each shard's lease row, whose fencing token is the
one the shard's FakeTermStore (term_store_fake.py) checks its term's writes and renewals
against (None: no row); a real renewer (renewals_fake.py) renews the leases and the
membership. It applies acquire_leadership's rule: a lease is taken when there is no row, it expired,
it is the taker's own or its holder's session is gone; each taking raises the token; the
taker learns how long another holder's lease had left. The test plays the other processes (a
leader elsewhere, a member that joins or leaves) and the operator (a deleted subscription)
through the methods before the protocol's.

Time is this process's monotonic clock throughout, the group's clock too: nothing here
compares it with another's. Each statement lets the event loop run, as a round trip to the
server does: a worker that loops on its statements never starves the test.
"""

import asyncio
import contextlib
import time
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass

import psycopg.errors

from poller.daemon.options import DaemonOptions
from poller.membership import ONLY_SHARD, PLAIN_LAYOUT, Layout, Member, ShardUnit
from poller.store.membership_store import GroupState
from poller.store.records import Lease, SubscriptionRecord
from poller.store.term_store import TermStore
from tests.unit.daemon.renewals_fake import started_renewer
from tests.unit.daemon.term_store_fake import FakeTermStore
from tests.unit.daemon.term_support import FAST

HOLDER = "process-under-test"
"""This process's member id, and every lease's holder it takes."""
ELSEWHERE = "process-elsewhere"
"""Another process sharing the subscription (sorted after HOLDER: see assign)."""


@dataclass
class LeaseRow:
    holder: str
    expires_at: float
    session_alive: bool = True


class FakeSubscriptionDatabase:
    def __init__(self, layout: Layout = PLAIN_LAYOUT, options: DaemonOptions = FAST) -> None:
        """Made on the test's event loop: its renewer (a real one, renewals_fake.py) starts."""
        self.holder = HOLDER
        self.not_before: dict[ShardUnit, float] = {}
        self.layout = layout
        self.deleted = False
        self.stores: dict[ShardUnit, FakeTermStore] = {}
        self._rows: dict[ShardUnit, LeaseRow] = {}
        # The group's members besides this process.
        self.others: list[str] = []
        # What the process did: each lease taken and when, the attempts refused, the terms
        # loaded, the connections released; the membership's renewals, its leaving.
        self.acquired: list[tuple[ShardUnit, float]] = []
        self.refused: Counter[ShardUnit] = Counter()
        self.loaded: list[ShardUnit] = []
        self.writes_released: list[ShardUnit] = []
        self.renewals = 0
        self.left = False
        self.closed = False
        self.renewer = started_renewer(self.store, self._group, self._leave, options)

    # The subscription, the other processes, the operator ----------------------------------

    def store(self, unit: ShardUnit = ONLY_SHARD) -> FakeTermStore:
        """The shard's store: its messages, checkpoint, settings, and its lease's token."""
        if unit not in self.stores:
            store = self.stores[unit] = FakeTermStore(layout=self.layout)
            store.lease_token = None  # no lease row until a process takes it
        return self.stores[unit]

    def led_elsewhere(
        self, unit: ShardUnit = ONLY_SHARD, seconds: float = 60.0, *, session_alive: bool = True
    ) -> None:
        """Another process took the shard's lease, for `seconds` from now."""
        store = self.store(unit)
        store.lease_token = (store.lease_token or 0) + 1
        self._rows[unit] = LeaseRow(ELSEWHERE, time.monotonic() + seconds, session_alive)

    def released_elsewhere(self, unit: ShardUnit = ONLY_SHARD) -> None:
        """The other process gave the lease up (release_leadership deletes the row)."""
        assert self._rows[unit].holder == ELSEWHERE
        self.store(unit).lease_token = None

    def delete_subscription(self) -> None:
        """delete_subscription: its lease rows go with it, and a new one cannot be inserted."""
        self.deleted = True
        for store in self.stores.values():
            store.lease_token = None

    def leaders(self) -> set[ShardUnit]:
        """The shards whose lease this process holds now."""
        return {
            unit
            for unit, store in self.stores.items()
            if store.lease_token is not None and self._rows[unit].holder == HOLDER
        }

    def record(self, unit: ShardUnit) -> SubscriptionRecord | None:
        """get_subscription_for_shard: the subscription as `unit`'s shard starts it."""
        return None if self.deleted else self.store(unit).record()

    # SubscriptionDatabase -----------------------------------------------------------------

    async def membership(self, stop: asyncio.Event) -> "FakeMembership":  # noqa: ARG002
        await round_trip()
        return FakeMembership(self)

    async def shard(self, lease: Lease, stop: asyncio.Event) -> "FakeShard":  # noqa: ARG002
        await round_trip()
        return FakeShard(self, lease)

    def release_writes(self, unit: ShardUnit) -> None:
        self.writes_released.append(unit)

    async def close(self) -> None:
        self.closed = True
        await self.renewer.close()

    def _group(self, member: bool) -> GroupState | None:
        """renew_process_leases' group: this process (while a member) and the others."""
        self.renewals += 1
        if self.deleted:
            return None
        now = time.monotonic()
        mine = [self.holder] if member else []
        members = [Member(m, now + 60.0) for m in [*mine, *self.others]]
        return GroupState(self.layout, members, now)

    def _leave(self) -> None:
        self.left = True

    # -------------------------------------------------------------------------------------

    def try_acquire(self, lease: Lease) -> float | None:
        if self.deleted:
            # The lease row's foreign key: the subscription is gone.
            raise psycopg.errors.ForeignKeyViolation("the subscription does not exist")
        unit, now = lease.unit, time.monotonic()
        store = self.store(unit)
        left = 0.0
        if store.lease_token is not None:
            row = self._rows[unit]
            if row.holder != lease.holder:
                if row.session_alive and now < row.expires_at:
                    self.refused[unit] += 1
                    return None
                left = max(0.0, row.expires_at - now)
        self._rows[unit] = LeaseRow(lease.holder, now + lease.ttl_seconds)
        lease.token = store.lease_token = (store.lease_token or 0) + 1
        store.lease = lease
        self.acquired.append((unit, now))
        return left


class FakeMembership:
    def __init__(self, database: FakeSubscriptionDatabase) -> None:
        self._database = database

    async def load_subscription(self, lease: Lease) -> SubscriptionRecord | None:
        await round_trip()
        return self._database.record(lease.unit)


class FakeShard:
    def __init__(self, database: FakeSubscriptionDatabase, lease: Lease) -> None:
        self._database = database
        self._lease = lease

    async def try_acquire(self) -> float | None:
        await round_trip()
        return self._database.try_acquire(self._lease)

    async def load_subscription(self) -> SubscriptionRecord | None:
        await round_trip()
        self._database.loaded.append(self._lease.unit)
        return self._database.record(self._lease.unit)

    async def ensure_not_restored(self) -> None:
        """Never a restored copy: that check's rules are the database tests'."""

    async def release(self) -> None:
        await self._database.store(self._lease.unit).release()

    @contextlib.asynccontextmanager
    async def term_store(self, layout: Layout) -> AsyncIterator[TermStore]:  # noqa: ARG002
        yield self._database.store(self._lease.unit)


async def round_trip() -> None:
    await asyncio.sleep(0)
