"""Every statement a subscription's leader runs, on its two connections.

A shard's leader runs the same statements for its shard, and its own parked set and
checkpoint (poller/store/shard_reads.py) where its layout has more than one shard; its reads
go through the read its process shares among the shards it leads (`ShardReader`).

The leader writes on one connection (checkpoints, parked rows) and reads on another: a
checkpoint commit (an fsync) would otherwise hold the next read back and show in the latency
tail. Its lease is renewed elsewhere, with every other lease of its process
(poller/store/lease_renewal.py). Both are the subscription's in this process, shared by the
shards it leads (poller/daemon/process/shared_connection.py), so no statement here opens a
transaction block on them. The term (poller.daemon.term.leadership_term) only coordinates.
"""

import datetime
import json
from collections.abc import Awaitable, Callable
from typing import Any

import psycopg

from outbox.positions import MAX_PART, START, Position
from outbox.queries import QUERIES
from outbox.read_servers import ReadProof, ServerState
from outbox.storable_text import storable_text
from poller.membership import ONLY_SHARD, PLAIN_LAYOUT, Layout
from poller.message import Message
from poller.store import shard_reads
from poller.store.archived_reads import ArchivedReads, read_through_archive
from poller.store.message_reads import message_from_row
from poller.store.read_server_check import server_state_async
from poller.store.records import (
    Lease,
    ReplayRequest,
    SkipRequest,
    SubscriptionRecord,
)
from poller.store.row_places import LeaderConnections, ShardReader, row_place

Connection = psycopg.AsyncConnection[Any]


async def try_acquire(conn: Connection, lease: Lease) -> float | None:
    """Take the lease when it is free, expired, or its holder's session is gone; a takeover
    raises the fencing token, which `lease.token` then holds. Returns how many seconds the
    previous holder's lease had left (0.0 when none), or None while someone else leads."""
    cursor = await conn.execute(QUERIES["acquire_leadership"], lease.query_parameters())
    row = await cursor.fetchone()
    lease.token = None if row is None else int(row[0])
    return None if row is None else float(row[1])


async def load_subscription(conn: Connection, lease: Lease) -> SubscriptionRecord | None:
    """The subscription as the lease's shard starts it: that shard's checkpoint, the layout."""
    cursor = await conn.execute(
        shard_reads.SHARD_QUERIES["get_subscription_for_shard"], lease.query_parameters()
    )
    row = await cursor.fetchone()
    return None if row is None else SubscriptionRecord.from_row(row)


class LeaderStore:
    def __init__(
        self,
        conn: Connection,
        read_conn: Connection,
        lease: Lease,
        layout: Layout = PLAIN_LAYOUT,
        *,
        shard_reader: ShardReader | None = None,
        open_alone: Callable[[], Awaitable[Connection]] | None = None,
        proof: ReadProof | None = None,
    ) -> None:
        """`shard_reader` reads for a sharded layout; `open_alone` opens a connection of
        this store's own for the one transaction block (the end of a change of the shard
        count), which must not take the shared connection's other statements in; `proof`,
        what every read on `read_conn` proves of its server (None: it is the database)."""
        self._conn = conn
        self._read_conn = read_conn
        self._open_alone = open_alone
        self.lease = lease
        self._subscription = lease.subscription_id
        # Where the shard's checkpoint is (a shard row, or the subscription's), as the term's
        # layout said, until a write finds it moved (see write_checkpoint); reads follow it.
        # Wherever it is, the database holds the reads and checkpoints of a draining count at
        # the change's barrier (layout_read_bound in sql/fragments.sql).
        self._rows = row_place(
            LeaderConnections(conn, read_conn, lease, proof, shard_reader),
            sharded=not layout.plain,
        )
        # Reads below the retired-up-to mark go through the publication's archive.
        self._archived: ArchivedReads | None = None
        self._archive_passed: tuple[Position, Position] | None = None

    @property
    def last_safe(self) -> Position | None:
        """A shard's last read: the publication's last message safe to read then; None for a
        plain subscription, whose reads see them all."""
        return self._rows.last_safe

    @property
    def more_to_read(self) -> bool:
        """The last read stopped at its row limit before the frontier: read again at once."""
        return self._rows.more_to_read

    # Reads, on the read connection --------------------------------------------------------

    async def read_batch(self, publication: str, after: Position, limit: int) -> list[Message]:
        """Where retention dropped messages after `after`, they are read from the
        publication's archive first (poller/store/archived_reads.py); without one it raises
        RetiredPositionError (the mark is read in the table read's snapshot): loudly, where
        reading on would skip. Nothing comes from a read server that fails the proof: a
        shard's read raises ReadServerRefusedError, a plain read finds nothing and its
        hidden-rows question, next, raises it."""
        if self._archive_passed is not None and self._archive_passed[0] == after:
            # The last read went through the archive up to a place past its last message of
            # this shard: the next starts there.
            after = self._archive_passed[1]
        if self._archived is None:
            self._archived = ArchivedReads(publication, self._rows.keep(), self._read_bound)
        messages, reached = await read_through_archive(
            lambda at, rows: self._rows.read_table(publication, at, rows),
            self._archived,
            self._read_conn,
            after,
            limit,
        )
        last = messages[-1].at if messages else after
        self._archive_passed = (last, reached) if reached > last else None
        return messages

    async def _read_bound(self) -> Position | None:
        """How far this term's count may read now, as the database says (a draining count's
        barrier), for reads of the archive, which the table read's own bound does not cover;
        None without a bound."""
        cursor = await self._conn.execute(
            shard_reads.SHARD_QUERIES["shard_read_bound"],
            {"subscription": self._subscription, "shard_count": self.lease.unit.shard_count},
        )
        row = await cursor.fetchone()
        if row is None:
            return START  # the subscription is gone: nothing more
        bound = Position(int(row[0]), int(row[1]))
        return None if bound == Position(MAX_PART, MAX_PART) else bound

    async def oldest_hidden_transaction(self, publication: str, after: Position) -> int | None:
        """The oldest committed transaction after `after` that the safe frontier still hides.
        A shard's read brought it along (its poll is one round trip, not two: each shard of N
        polls as often as one reader of all its messages would)."""
        return await self._rows.oldest_hidden_transaction(publication, after)

    async def blockers_before(self, transaction_id: int) -> list[tuple[Any, ...]]:
        """Sessions and prepared transactions holding back rows at or after transaction_id,
        without their SQL. Asked of the primary, where they run: a hot standby that reads
        shows its own."""
        cursor = await self._conn.execute(
            QUERIES["blocking_transactions_before"],
            {"transaction_id": str(transaction_id), "with_query": False},
        )
        return await cursor.fetchall()

    async def read_server_state(self) -> ServerState:
        """Where the server the reads go to stands (a hot standby, or the primary)."""
        return await server_state_async(self._read_conn)

    async def primary_state(self) -> ServerState:
        return await server_state_async(self._conn)

    # The subscription and its parked messages ---------------------------------------------

    async def replay_requests(self) -> list[ReplayRequest]:
        """The parked messages (of this shard) an operator asked to deliver again."""
        rows = await self._rows.parked_rows()
        return [ReplayRequest(message_from_row(row[:-2]), *row[-2:]) for row in rows]

    # A change of the shard count ----------------------------------------------------------

    async def shard_change_drained(self) -> bool:
        return await shard_reads.shard_change_drained(self._conn, self._subscription)

    async def finish_shard_change(self) -> bool:
        if self._open_alone is None:
            return await shard_reads.finish_shard_change(self._conn, self._subscription)
        async with await self._open_alone() as conn:
            return await shard_reads.finish_shard_change(conn, self._subscription)

    # Leadership ---------------------------------------------------------------------------

    async def release(self) -> None:
        await self._conn.execute(QUERIES["release_leadership"], self.lease.query_parameters())

    # Fenced writes ------------------------------------------------------------------------

    async def write_checkpoint(
        self, epoch: int, position: Position, runtime: dict[str, Any]
    ) -> bool:
        """False when refused: fenced out, another epoch, it would move backwards, or the
        subscription's layout no longer has this term's shard. A draining shard's checkpoint
        stops at the barrier (in SQL).

        The one shard of one (`ONLY_SHARD`) keeps its checkpoint in the subscription's row
        while the subscription is plain, in a shard row of its own while a change from or to
        one shard drains, and its term runs on through such a change: a write refused in one
        place is tried in the other, and the store keeps to that place from then on. Refused,
        a plain term's checkpoints of the messages it delivered after a change were lost, and
        its successor delivered them again."""
        parameters = {
            **self.lease.query_parameters(),
            "epoch": epoch,
            **position.query_parameters(),
            "runtime": json.dumps(runtime),
        }
        if await self._rows.write_checkpoint(parameters):
            return True
        if self.lease.unit != ONLY_SHARD:
            return False
        # The other place starts as a term that has read nothing there: no last read's
        # frontier, hidden transaction or row limit carries over.
        across = self._rows.across()
        if not await across.write_checkpoint(parameters):
            return False
        self._rows = across
        return True

    async def park(self, epoch: int, message: Message, attempts: int, reason: str) -> int | None:
        """The row's attempts in all (a re-read message's add to the earlier ones), or None
        when refused: fenced out, or another epoch."""
        cursor = await self._conn.execute(
            QUERIES["park_message"],
            {
                **self.lease.query_parameters(),
                "epoch": epoch,
                **message.at.query_parameters(),
                "attempts": attempts,
                "last_error": storable_text(reason),
            },
        )
        row = await cursor.fetchone()
        return None if row is None else int(row[0])

    async def repark_replayed(
        self, request: ReplayRequest, attempts: int, reason: str
    ) -> int | None:
        """Park a replayed message again, whatever the epoch (replays outlive seeks), clearing
        the request the replay read: the row's attempts in all, or None when fenced out or
        when the row is gone (purged while it was replayed: nothing is written)."""
        cursor = await self._conn.execute(
            QUERIES["repark_replayed_message"],
            {
                **self.lease.query_parameters(),
                "position": request.message.position,
                "attempts": attempts,
                "last_error": storable_text(reason),
                "replay_requested_at": request.requested_at,
            },
        )
        row = await cursor.fetchone()
        return None if row is None else int(row[0])

    async def unpark(self, position: Position, parked_at: datetime.datetime) -> bool:
        """Delete the parked row a replay read (`parked_at` names it). False when fenced out,
        or when that row is gone (a purge) or was replaced by a newer park."""
        cursor = await self._conn.execute(
            QUERIES["unpark_message"],
            {
                **self.lease.query_parameters(),
                "position": position.position,
                "parked_at": parked_at,
            },
        )
        return await cursor.fetchone() is not None

    async def settle_skip_request(self, request: SkipRequest) -> bool:
        """Clear `request` if the stored checkpoint has reached it or a seek voided it; False
        when it stays (not reached yet, replaced by a newer one) or this leader is fenced out."""
        cursor = await self._conn.execute(
            QUERIES["settle_skip_request"],
            {
                **self.lease.query_parameters(),
                **request.to.query_parameters(),
                "epoch": request.epoch,
            },
        )
        return await cursor.fetchone() is not None
