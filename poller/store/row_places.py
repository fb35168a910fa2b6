"""Where a leader's shard keeps its reads, parked set and checkpoint: a plain subscription's
in the subscription's own rows, a shard of a sharded layout in its shard's rows
(poller/store/shard_reads.py). LeaderStore picks one when its term starts and swaps it for the
other only where a checkpoint write finds the rows moved (LeaderStore.write_checkpoint).
"""

from dataclasses import dataclass
from typing import Any, Protocol

import psycopg

from outbox.positions import Position
from outbox.queries import QUERIES
from outbox.read_servers import ReadProof, proof_parameters
from outbox.shards import message_shard
from poller.membership import ShardUnit
from poller.message import Message
from poller.store import shard_reads
from poller.store.archived_reads import Keep
from poller.store.read_server_check import refuse_unproven
from poller.store.records import Lease
from poller.store.retired_positions import read_leader_batch_async

Connection = psycopg.AsyncConnection[Any]


class ShardReader(Protocol):
    """The read a process shares among the shards it leads
    (poller/daemon/process/shared_reads.py)."""

    async def read(
        self,
        publication: str,
        unit: ShardUnit,
        after: Position,
        limit: int,
        proof: ReadProof | None,
    ) -> shard_reads.ShardRead: ...


@dataclass(frozen=True)
class LeaderConnections:
    """What either place's statements run on: the write and read connections, the lease
    that fences them, what each read proves of its server, and a sharded layout's reader."""

    conn: Connection
    read_conn: Connection
    lease: Lease
    proof: ReadProof | None
    shard_reader: ShardReader | None


class RowPlace(Protocol):
    last_safe: Position | None
    """A shard's last read: the publication's last message safe to read then (see
    shard_reads.ShardBatch); None for a plain subscription, whose reads see them all."""
    more_to_read: bool
    """The last read stopped at its row limit before the frontier: read again at once."""

    def keep(self) -> Keep | None:
        """Which of an archive's messages are this place's (None: all)."""

    async def read_table(self, publication: str, after: Position, limit: int) -> list[Message]:
        """RetiredPositionError when retention retired messages after `after`."""

    async def oldest_hidden_transaction(self, publication: str, after: Position) -> int | None:
        """The oldest committed transaction after `after` that the safe frontier hides."""

    async def parked_rows(self) -> list[tuple[Any, ...]]:
        """The parked rows an operator asked to deliver again."""

    async def write_checkpoint(self, parameters: dict[str, Any]) -> bool:
        """False when refused."""

    def across(self) -> "RowPlace":
        """The other place, as a term that has read nothing there yet sees it."""


def row_place(connections: LeaderConnections, *, sharded: bool) -> RowPlace:
    return ShardedRows(connections) if sharded else PlainRows(connections)


class PlainRows:
    """A plain subscription's: the subscription's row, its parked set, the whole outbox."""

    def __init__(self, connections: LeaderConnections) -> None:
        self._connections = connections
        self.last_safe: Position | None = None
        self.more_to_read = False

    def keep(self) -> Keep | None:
        return None

    async def read_table(self, publication: str, after: Position, limit: int) -> list[Message]:
        c = self._connections
        return await read_leader_batch_async(
            c.read_conn, c.lease.subscription_id, publication, after, limit, c.proof
        )

    async def oldest_hidden_transaction(self, publication: str, after: Position) -> int | None:
        c = self._connections
        cursor = await c.read_conn.execute(
            QUERIES["oldest_hidden_transaction"],
            {
                "publication": publication,
                **after.query_parameters("after_"),
                **proof_parameters(c.proof),
            },
        )
        row = await cursor.fetchone()
        assert row is not None  # the proof's one row, with an aggregate beside it
        await refuse_unproven(c.read_conn, c.proof, row[0])
        oldest_hidden: int | None = row[1]
        return oldest_hidden

    async def parked_rows(self) -> list[tuple[Any, ...]]:
        c = self._connections
        cursor = await c.conn.execute(
            QUERIES["read_parked_messages"], {"subscription": c.lease.subscription_id}
        )
        return await cursor.fetchall()

    async def write_checkpoint(self, parameters: dict[str, Any]) -> bool:
        cursor = await self._connections.conn.execute(QUERIES["write_checkpoint"], parameters)
        return await cursor.fetchone() is not None

    def across(self) -> RowPlace:
        return ShardedRows(self._connections)


class ShardedRows:
    """A shard's of a sharded layout: its shard row and parked set, and the messages of its
    keys, read through the read its process shares among the shards it leads."""

    def __init__(self, connections: LeaderConnections) -> None:
        self._connections = connections
        self.last_safe: Position | None = None
        self._oldest_hidden: int | None = None  # read with the last read
        self.more_to_read = False

    def keep(self) -> Keep | None:
        unit = self._connections.lease.unit
        return lambda key, position: message_shard(key, position, unit.shard_count) == unit.shard

    async def read_table(self, publication: str, after: Position, limit: int) -> list[Message]:
        c = self._connections
        if c.shard_reader is None:
            raise RuntimeError("a sharded layout's store is built with a shard reader")
        read = await c.shard_reader.read(publication, c.lease.unit, after, limit, c.proof)
        self.last_safe = read.last_safe
        self._oldest_hidden = read.oldest_hidden
        self.more_to_read = read.more
        return read.messages

    async def oldest_hidden_transaction(self, publication: str, after: Position) -> int | None:  # noqa: ARG002
        """The shard's read brought it along (its poll is one round trip, not two: each shard
        of N polls as often as one reader of all its messages would)."""
        return self._oldest_hidden

    async def parked_rows(self) -> list[tuple[Any, ...]]:
        c = self._connections
        return await shard_reads.shard_parked_rows(c.conn, c.lease.subscription_id, c.lease.unit)

    async def write_checkpoint(self, parameters: dict[str, Any]) -> bool:
        return await shard_reads.write_shard_checkpoint(self._connections.conn, parameters)

    def across(self) -> RowPlace:
        return PlainRows(self._connections)
