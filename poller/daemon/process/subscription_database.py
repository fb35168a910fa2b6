"""What one subscription's coordinator (coordinator.py) and shard workers (worker.py) in a
process ask of the database.

PostgresSubscriptionDatabase (postgres_database.py) runs each as a statement on the process's
connections for the subscription (subscription_connections.py), and the renewals on the
renewer's (lease_renewer.py); the unit tests drive a real coordinator, real workers and a real
renewer through an in-memory fake of the same methods.

An attempt first asks for its connection (`membership`, `shard`: Stopped once told to stop
while the database is unreachable), then runs its statements on it until one finds it lost
(psycopg.OperationalError); the caller backs off and asks again, reopening it.
"""

import asyncio
from contextlib import AbstractAsyncContextManager
from typing import Protocol

from poller.daemon.process.lease_renewer import LeaseRenewer
from poller.membership import Layout, ShardUnit
from poller.store.records import Lease, SubscriptionRecord
from poller.store.term_store import TermStore


class MembershipConnection(Protocol):
    """The connection the coordinator checks the subscription on as it starts."""

    async def load_subscription(self, lease: Lease) -> SubscriptionRecord | None:
        """The subscription as `lease`'s shard starts it; None when it does not exist."""


class ShardConnection(Protocol):
    """A shard worker's statements about its lease, on the connection its lease goes on."""

    async def try_acquire(self) -> float | None:
        """Take the lease when it is free, expired, or its holder's session is gone (its
        token then raised). How many seconds the previous holder's lease had left (0.0 when
        none, or it was this process's own), or None while someone else leads."""

    async def load_subscription(self) -> SubscriptionRecord | None:
        """The subscription as the shard starts it: its checkpoint, the layout."""

    async def ensure_not_restored(self) -> None:
        """Raises RestoredDatabaseError when the database is a restored copy."""

    async def release(self) -> None:
        """Give the lease up (a shard of a layout that no longer has it)."""

    def term_store(self, layout: Layout) -> AbstractAsyncContextManager[TermStore]:
        """The store of a term of the lease under `layout`, for as long as the term runs (its
        reads on the read connection, got under the `shard` call's stop);
        ReadServerRefusedError when the read server may not be read from."""


class SubscriptionDatabase(Protocol):
    @property
    def holder(self) -> str:
        """The process's member id in the subscription's group, and every lease's holder."""

    @property
    def renewer(self) -> LeaseRenewer:
        """Renews every lease the process holds of the subscription, and its membership, on
        a thread and a connection of its own; the coordinator takes the group from it."""

    @property
    def not_before(self) -> dict[ShardUnit, float]:
        """Per shard, until when a takeover's term may start nothing (see SelfFence): kept by
        the process, not the term, as its next term may re-take the lease as its own."""

    async def membership(self, stop: asyncio.Event) -> MembershipConnection: ...

    async def shard(self, lease: Lease, stop: asyncio.Event) -> ShardConnection:
        """The connection `lease`'s shard goes on while its worker runs here, until
        `release_writes`."""

    def release_writes(self, unit: ShardUnit) -> None: ...

    async def close(self) -> None: ...
