"""The SubscriptionDatabase (subscription_database.py) of a daemon process: each question a
statement on the process's connections for the subscription (subscription_connections.py), the
renewals on the renewer's own (lease_renewer.py)."""

import asyncio
import contextlib
import os
import socket
from collections.abc import AsyncIterator, Sequence

from poller.daemon.options import DaemonOptions
from poller.daemon.process.lease_renewer import LeaseRenewer
from poller.daemon.process.shared_connection import Connection, SharedConnection
from poller.daemon.process.subscription_connections import SubscriptionConnections
from poller.membership import Layout, ShardUnit
from poller.reconnect import Reconnector
from poller.store.leader_store import LeaderStore, load_subscription, try_acquire
from poller.store.lease_renewal import HeldLease, ProcessRenewal, renew_process_leases
from poller.store.membership_store import leave_membership
from poller.store.read_server_check import ensure_read_server_async
from poller.store.records import Lease, SubscriptionRecord
from poller.store.restore_check import ensure_not_restored_async
from poller.store.term_store import TermStore


class PostgresSubscriptionDatabase:
    def __init__(
        self,
        database_url: str,
        read_database_url: str | None,
        subscription_id: str,
        stop: asyncio.Event,
        *,
        options: DaemonOptions,
    ) -> None:
        self._database_url = database_url
        self._subscription_id = subscription_id
        self._ttl_seconds = options.lease_seconds
        self._connections = SubscriptionConnections(
            database_url, read_database_url, subscription_id, stop
        )
        self.renewer = LeaseRenewer(self._renewals, subscription_id, options)
        self.renewer.start()

    @property
    def holder(self) -> str:
        return self._connections.holder

    @property
    def not_before(self) -> dict[ShardUnit, float]:
        return self._connections.not_before

    async def membership(self, stop: asyncio.Event) -> "PostgresMembership":
        return PostgresMembership(await self._connections.writes.get(stop))

    async def shard(self, lease: Lease, stop: asyncio.Event) -> "PostgresShard":
        # Shared with the subscription's other shards and its membership in this process
        # (see shared_connection.py).
        writes = self._connections.writes_of(lease.unit)
        return PostgresShard(self._connections, writes, await writes.get(stop), lease, stop)

    def release_writes(self, unit: ShardUnit) -> None:
        self._connections.release_writes(unit)

    async def close(self) -> None:
        try:
            await self.renewer.close()
        finally:
            await self._connections.close()

    def _renewals(self, stop: asyncio.Event) -> "PostgresRenewals":
        """The renewer's database, on its own thread's loop: a connection of its own, under
        the process's member id like the others."""
        connection = SharedConnection(
            Reconnector(
                self._database_url,
                self.holder,
                f"{self._subscription_id} leases",
                stop=stop,
            )
        )
        return PostgresRenewals(
            connection, self._subscription_id, self.holder, self._ttl_seconds, stop
        )


class PostgresMembership:
    def __init__(self, conn: Connection) -> None:
        self._conn = conn

    async def load_subscription(self, lease: Lease) -> SubscriptionRecord | None:
        return await load_subscription(self._conn, lease)


class PostgresRenewals:
    def __init__(
        self,
        connection: SharedConnection,
        subscription_id: str,
        holder: str,
        ttl_seconds: float,
        stop: asyncio.Event,
    ) -> None:
        self._connection = connection
        self._subscription_id = subscription_id
        self._holder = holder
        self._ttl_seconds = ttl_seconds
        self._stop = stop

    async def renew(self, leases: Sequence[HeldLease], *, member: bool) -> ProcessRenewal | None:
        return await renew_process_leases(
            await self._connection.get(self._stop),
            self._subscription_id,
            self._holder,
            socket.gethostname(),
            os.getpid(),
            self._ttl_seconds,
            leases,
            member=member,
        )

    async def leave(self) -> None:
        conn = await self._connection.get(self._stop)
        await leave_membership(conn, self._subscription_id, self._holder)

    async def forget_connection(self) -> None:
        await self._connection.close()

    async def close(self) -> None:
        await self._connection.close()


class PostgresShard:
    def __init__(
        self,
        connections: SubscriptionConnections,
        writes: SharedConnection,
        conn: Connection,
        lease: Lease,
        stop: asyncio.Event,
    ) -> None:
        self._connections = connections
        self._writes = writes
        self._conn = conn
        self._lease = lease
        self._stop = stop

    async def try_acquire(self) -> float | None:
        return await try_acquire(self._conn, self._lease)

    async def load_subscription(self) -> SubscriptionRecord | None:
        return await load_subscription(self._conn, self._lease)

    async def ensure_not_restored(self) -> None:
        await ensure_not_restored_async(self._conn, self._lease.subscription_id)

    async def release(self) -> None:
        await LeaderStore(self._conn, self._conn, self._lease).release()

    @contextlib.asynccontextmanager
    async def term_store(self, layout: Layout) -> AsyncIterator[TermStore]:
        shared = self._connections
        read_conn = await shared.reads.get(self._stop)
        # Checked here, then proven again by every read (outbox.read_servers.ReadProof).
        proof = (
            await ensure_read_server_async(self._conn, read_conn, shared.read_url_shown)
            if shared.reads_elsewhere
            else None
        )
        try:
            yield LeaderStore(
                self._conn,
                read_conn,
                self._lease,
                layout,
                shard_reader=shared.shard_reads,
                open_alone=self._writes.open_alone,
                proof=proof,
            )
        finally:
            shared.shard_reads.forget(self._lease.unit)
