"""What a leadership term (poller.daemon.term.leadership_term) and its helpers ask of their store.

LeaderStore (leader_store.py) runs each of these as a statement on PostgreSQL; the unit
tests drive a term through an in-memory fake of the same methods. Every write is fenced by
the lease's token and answers False or None when refused, so a term can never tell a write
that did not land from one refused for cause: it renews, and the renewal says why.
"""

import datetime
from typing import Any, Protocol

from outbox.positions import Position
from outbox.read_servers import ServerState
from poller.message import Message
from poller.store.records import Lease, ReplayRequest, SkipRequest


class TermStore(Protocol):
    @property
    def lease(self) -> Lease:
        """The lease this term holds (its shard, its fencing token)."""

    @property
    def last_safe(self) -> Position | None:
        """A shard's last read: the publication's last message safe to read then (any
        shard); None for a plain subscription, whose reads see every message."""

    @property
    def more_to_read(self) -> bool:
        """The last read stopped at its row limit before the safe frontier (a read shared by
        a process's shards): read again at once."""

    # Reads --------------------------------------------------------------------------------

    async def read_batch(self, publication: str, after: Position, limit: int) -> list[Message]:
        """Up to `limit` messages after `after` in delivery order, none at or past the safe
        frontier (a transaction still running may commit below a later one)."""

    async def oldest_hidden_transaction(self, publication: str, after: Position) -> int | None:
        """The oldest committed transaction after `after` the safe frontier still hides."""

    async def blockers_before(self, transaction_id: int) -> list[tuple[Any, ...]]:
        """The sessions holding back rows at or after `transaction_id` (Blocker's columns,
        the query None)."""

    async def read_server_state(self) -> ServerState: ...

    async def primary_state(self) -> ServerState: ...

    async def replay_requests(self) -> list[ReplayRequest]:
        """The parked messages (of this shard) an operator asked to deliver again."""

    # A change of the shard count ----------------------------------------------------------

    async def shard_change_drained(self) -> bool: ...

    async def finish_shard_change(self) -> bool: ...

    # The lease (renewed by the process's renewer: poller/daemon/term/lease_watch.py) ------

    async def release(self) -> None: ...

    # Fenced writes ------------------------------------------------------------------------

    async def write_checkpoint(
        self, epoch: int, position: Position, runtime: dict[str, Any]
    ) -> bool:
        """False when fenced out, in another epoch, or when it would move backwards."""

    async def park(self, epoch: int, message: Message, attempts: int, reason: str) -> int | None:
        """The row's attempts in all, or None when fenced out or in another epoch."""

    async def repark_replayed(
        self, request: ReplayRequest, attempts: int, reason: str
    ) -> int | None:
        """The row's attempts in all, or None when fenced out or the row is gone."""

    async def unpark(self, position: Position, parked_at: datetime.datetime) -> bool:
        """False when fenced out, or that row is gone or was parked anew."""

    async def settle_skip_request(self, request: SkipRequest) -> bool:
        """Clear `request` once the stored checkpoint reached it or a seek voided it."""
