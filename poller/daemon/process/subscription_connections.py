"""The connections a process keeps for one subscription, whatever the number of shards it
leads: four to the database (the shards' lease takings, checkpoints and parked rows, a
shard's on the least used one) and one to read messages from (the database, or the hot
standby of --read-database-url), shared by its shards' terms (shared_connection.py), with the
one read its shards share (shared_reads.py). Each opens when first asked for, so a process
that leads one shard, or only stands by, holds one or two. The lease renewer keeps one more,
on its own thread (lease_renewer.py): every lease and the membership, renewed in one statement.

Four for writes, not one: under a CPU-bound `def` handler each statement's answer waits for the
event loop to get the GIL back from the handler threads, and the statements of 16 shards queued
on one connection came so late that their leases lapsed (see docs/explanation/daemon.md).
"""

import asyncio
from collections import Counter

from outbox.database_url import mask_password
from poller.daemon.process.shared_connection import ConnectionGroup, SharedConnection
from poller.daemon.process.shared_reads import SharedShardReads
from poller.membership import ShardUnit
from poller.reconnect import Reconnector
from poller.store.message_reads import prepare_reader_async
from poller.store.records import new_holder_id

WRITE_CONNECTIONS = 4
CONNECTIONS_PER_SUBSCRIPTION = WRITE_CONNECTIONS + 2
"""What a process holds for each subscription it runs (besides its one LISTEN connection): the
writes', the reads' and the lease renewer's (poller/daemon/process/lease_renewer.py)."""


class SubscriptionConnections:
    def __init__(
        self,
        database_url: str,
        read_database_url: str | None,
        subscription_id: str,
        stop: asyncio.Event,
    ) -> None:
        # The process's id in the subscription's group, and every lease's holder: it names
        # the connections (application_name), so another process sees at once when this
        # one's session is gone (see Lease).
        self.holder = new_holder_id()
        read_url = read_database_url or database_url
        self.reads_elsewhere = read_url != database_url
        self.read_url_shown = mask_password(read_url)
        group = ConnectionGroup()
        self._writes = [
            SharedConnection(
                Reconnector(database_url, self.holder, subscription_id, stop=stop), group
            )
            for _ in range(WRITE_CONNECTIONS)
        ]
        # The coordinator's, to load the subscription as it starts.
        self.writes = self._writes[0]
        self._writes_of: dict[ShardUnit, int] = {}
        # Sorts off, UTC: see prepare_reader_async.
        self.reads = SharedConnection(
            Reconnector(
                read_url,
                self.holder,
                f"{subscription_id} reads",
                stop=stop,
                prepare=prepare_reader_async,
            ),
            group,
        )
        self.shard_reads = SharedShardReads(self.reads, stop, subscription_id)
        # Per shard, until when a takeover's term may start nothing (see SelfFence): kept by
        # the process, not the term, as its next term may re-take the lease as its own.
        self.not_before: dict[ShardUnit, float] = {}

    def writes_of(self, unit: ShardUnit) -> SharedConnection:
        """The connection a shard's lease, checkpoints and parked rows go on while its worker
        runs here: the least used one (by shard number, the shards a process is dealt, every
        fourth, would all land on one), kept until `release_writes`."""
        if unit not in self._writes_of:
            taken = Counter(self._writes_of.values())
            self._writes_of[unit] = min(range(len(self._writes)), key=lambda i: taken[i])
        return self._writes[self._writes_of[unit]]

    def release_writes(self, unit: ShardUnit) -> None:
        self._writes_of.pop(unit, None)

    async def close(self) -> None:
        await self.shard_reads.close()
        await self.reads.close()
        for writes in self._writes:
            await writes.close()
