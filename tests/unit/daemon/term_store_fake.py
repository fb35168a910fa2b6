"""An in-memory TermStore (poller/store/term_store.py) for the leadership term's unit tests.

It holds what the term's statements touch in PostgreSQL, for one plain subscription: the
messages of its publication and the safe frontier, the subscription's row (checkpoint, epoch,
settings, replay and skip requests), the lease's row and the parked rows; and it applies the
rules those statements apply in sql/queries.sql: every write is fenced by the lease's token,
a checkpoint and a park only land in the stored epoch, a checkpoint never moves backwards,
a re-park clears only the replay request it read, an unpark deletes only the row it read. The
test plays the writers, the operator and the other processes (appends and commits, seek,
settings, replay and skip requests, a takeover of the lease, a slow commit, a renewer that
gets no turn) through the methods before the store's own. The lease's renewal is the
process's renewer's (renewals_fake.py runs a real one over this store).

What only PostgreSQL can show (snapshots, locks between concurrent statements, shard
layouts, hot standbys) stays with the database tests: a sharded layout here only names the
term's shard (the worker's and the coordinator's tests give each shard a store of its own),
its reads are a plain subscription's.
"""

import asyncio
import datetime
from dataclasses import dataclass
from typing import Any, NamedTuple

import psycopg

from outbox.positions import START, Position
from outbox.read_servers import ServerState
from poller.membership import PLAIN_LAYOUT, Layout
from poller.message import Message
from poller.store.records import (
    Lease,
    LeaseState,
    ReplayRequest,
    SkipRequest,
    SubscriptionRecord,
)

SUBSCRIPTION = "billing"
PUBLICATION = "orders"


# What happened, in order: the fake's writes and an operator's seeks, and (from the tests'
# handlers, on their threads) each message handled. Checks of "the checkpoint only passes
# what was delivered" read it.


class Handled(NamedTuple):
    at: Position


class Checkpointed(NamedTuple):
    epoch: int
    at: Position


class Sought(NamedTuple):
    epoch: int
    to: Position


class Parked(NamedTuple):
    at: Position
    attempts: int


class Unparked(NamedTuple):
    at: Position


Event = Handled | Checkpointed | Sought | Parked | Unparked


@dataclass
class ParkedRow:
    message: Message
    attempts: int
    last_error: str
    parked_at: datetime.datetime
    replay_requested_at: datetime.datetime | None = None


class FakeTermStore:
    def __init__(
        self, settings: dict[str, Any] | None = None, layout: Layout = PLAIN_LAYOUT
    ) -> None:
        self.journal: list[Event] = []
        # The store's side of the protocol.
        self.lease = Lease(SUBSCRIPTION, "holder-under-test", ttl_seconds=4.0, token=1)
        self.last_safe: Position | None = None  # a plain subscription's reads see every message
        self.more_to_read = False  # a plain subscription reads up to the frontier
        # The publication: its messages in delivery order, and the transactions still open.
        self.messages: list[Message] = []
        self._next_transaction = 100
        self._next_position = 1
        self._open: set[int] = set()
        # The subscription's row.
        self.checkpoint = START
        self.epoch = 0
        self.settings: dict[str, Any] = dict(settings or {})
        self.replay_request_count = 0
        self.skip_request: SkipRequest | None = None
        self.layout = layout
        # The lease's row: its token (another process's after a takeover; None once released)
        # and the runtime figures written with it.
        self.lease_token: int | None = self.lease.token
        self.runtime: dict[str, Any] | None = None
        self.parked: dict[int, ParkedRow] = {}
        # Every statement the term ran, with whether it was accepted (a read always is).
        self.calls: list[tuple[str, bool]] = []
        # Cleared by hold_writes: the fenced writes wait, as behind a slow commit.
        self._writes_flow = asyncio.Event()
        self._writes_flow.set()
        self.writes_waiting = 0
        # Set by cut_connection: the term's next read finds its connection gone.
        self._connection_cut = False
        # Cleared by hold_renewals: the process's renewals wait, as behind a starved renewer.
        self._renewals_flow = asyncio.Event()
        self._renewals_flow.set()
        self._clock = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)

    # The publication ----------------------------------------------------------------------

    def append(self, *keys: str | None, transaction_id: int | None = None) -> list[Message]:
        """One message per key, in delivery order. Each in a transaction of its own that
        commits at once, unless `transaction_id` names one open_transaction() returned."""
        appended = []
        for key in keys:
            if transaction_id is None:
                transaction, self._next_transaction = (
                    self._next_transaction,
                    self._next_transaction + 1,
                )
            else:
                transaction = transaction_id
            message = Message(
                position=self._next_position,
                transaction_id=transaction,
                publication=PUBLICATION,
                message_id=f"m{self._next_position}",
                message_type="OrderPlaced",
                partition_key=key,
                data_text=f'{{"n": {self._next_position}}}',
                headers_text="{}",
                appended_at=self._now(),
            )
            self._next_position += 1
            appended.append(message)
        self.messages = sorted([*self.messages, *appended], key=lambda m: m.at)
        return appended

    def open_transaction(self) -> int:
        """A transaction that stays open: it holds the safe frontier back until commit()."""
        transaction = self._next_transaction
        self._next_transaction += 1
        self._open.add(transaction)
        return transaction

    def commit(self, transaction_id: int) -> None:
        self._open.discard(transaction_id)

    @property
    def frontier(self) -> int:
        """The oldest transaction still running: nothing of it or after it is safe to read."""
        return min(self._open, default=self._next_transaction)

    # The operator and other processes -----------------------------------------------------

    def record(self) -> SubscriptionRecord:
        """The subscription as a term starts it (load_subscription)."""
        return SubscriptionRecord(
            SUBSCRIPTION,
            PUBLICATION,
            self.checkpoint,
            self.epoch,
            dict(self.settings),
            self.replay_request_count,
            self.layout,
        )

    def seek(self, to: Position) -> None:
        """seek_subscription: the checkpoint moves to `to`, in a new epoch."""
        self.epoch += 1
        self.checkpoint = to
        self.journal.append(Sought(self.epoch, to))

    def update_settings(self, **changes: Any) -> None:
        self.settings = {**self.settings, **changes}

    def request_skip(self, to: Position) -> None:
        """request_skip (which refuses a target not past the stored checkpoint)."""
        assert to > self.checkpoint
        self.skip_request = SkipRequest(to, self.epoch)

    def park_earlier(self, message: Message, attempts: int, error: str) -> None:
        """A row an earlier term parked."""
        self.parked[message.position] = ParkedRow(message, attempts, error, self._now())

    def request_replay(self) -> None:
        """mark_parked_for_replay (every row), then request_replay if it marked any."""
        for row in self.parked.values():
            row.replay_requested_at = self._now()
        if self.parked:
            self.replay_request_count += 1

    def take_lease_over(self) -> None:
        """Another process takes the lease (acquire_leadership raises the token)."""
        assert self.lease_token is not None
        self.lease_token += 1

    def cut_connection(self) -> None:
        """The term's connection is lost: its next read raises, as psycopg does."""
        self._connection_cut = True

    def hold_renewals(self) -> None:
        """The lease's renewals wait (as a renewer that gets no turn) until let through."""
        self._renewals_flow.clear()

    def let_renewals_through(self) -> None:
        self._renewals_flow.set()

    def hold_writes(self) -> None:
        """Parks, unparks and checkpoints wait (as behind a slow commit) until let through."""
        self._writes_flow.clear()

    def let_writes_through(self) -> None:
        self._writes_flow.set()

    @property
    def released(self) -> bool:
        return self.lease_token is None

    def accepted(self, statement: str) -> list[bool]:
        """Whether each call of `statement` was accepted, in order."""
        return [ok for name, ok in self.calls if name == statement]

    # TermStore: reads ---------------------------------------------------------------------

    async def read_batch(self, publication: str, after: Position, limit: int) -> list[Message]:
        if self._connection_cut:
            self._connection_cut = False
            raise psycopg.OperationalError("the connection is lost")
        self.calls.append(("read_batch", True))
        frontier = self.frontier
        return [
            m
            for m in self.messages
            if m.publication == publication and m.at > after and m.transaction_id < frontier
        ][:limit]

    async def oldest_hidden_transaction(self, publication: str, after: Position) -> int | None:
        """Of the committed transactions: a running one's rows are nobody else's to see."""
        self.calls.append(("oldest_hidden_transaction", True))
        frontier = self.frontier
        hidden = [
            m.transaction_id
            for m in self.messages
            if m.publication == publication
            and m.at > after
            and m.transaction_id >= frontier
            and m.transaction_id not in self._open
        ]
        return min(hidden, default=None)

    async def blockers_before(self, transaction_id: int) -> list[tuple[Any, ...]]:  # noqa: ARG002
        return []  # no sessions to name: the stall warning's wording is the database tests'

    async def read_server_state(self) -> ServerState:
        raise AssertionError("the fake has no read server: leave read_database_url unset")

    async def primary_state(self) -> ServerState:
        raise AssertionError("the fake has no read server: leave read_database_url unset")

    async def replay_requests(self) -> list[ReplayRequest]:
        """read_parked_messages: the rows marked for replay, in delivery order."""
        rows = sorted(self.parked.values(), key=lambda row: row.message.at)
        return [
            ReplayRequest(row.message, row.parked_at, row.replay_requested_at)
            for row in rows
            if row.replay_requested_at is not None
        ]

    async def shard_change_drained(self) -> bool:
        raise AssertionError("a plain subscription has no change of shard count")

    async def finish_shard_change(self) -> bool:
        raise AssertionError("a plain subscription has no change of shard count")

    # The process's renewer (renewals_fake.py) -------------------------------------------

    async def renew(self, token: int, runtime: dict[str, Any] | None) -> LeaseState | None:
        """renew_process_leases for this lease: the subscription as stored, or None once the
        lease is not `token`'s; the runtime figures given are recorded with it."""
        await self._renewals_flow.wait()
        leads = self.lease_token == token
        self.calls.append(("renew", leads))
        if not leads:
            return None
        if runtime is not None:
            self.runtime = runtime
        return LeaseState(
            self.epoch,
            self.checkpoint,
            dict(self.settings),
            self.replay_request_count,
            self.skip_request,
            self.layout,
        )

    # TermStore: the lease -----------------------------------------------------------------

    async def release(self) -> None:
        if self._leads("release"):
            self.lease_token = None

    # TermStore: fenced writes -------------------------------------------------------------

    async def write_checkpoint(
        self, epoch: int, position: Position, runtime: dict[str, Any]
    ) -> bool:
        """write_checkpoint: the runtime lands for the leader whatever the rest (its CTE runs
        on its own); the checkpoint only in the stored epoch and never backwards."""
        await self._turn_to_write()
        leads = self.lease_token == self.lease.token
        if leads:
            self.runtime = runtime
        moves = leads and epoch == self.epoch and position >= self.checkpoint
        self.calls.append(("write_checkpoint", moves))
        if moves:
            self.checkpoint = position
            self.journal.append(Checkpointed(epoch, position))
        return moves

    async def park(self, epoch: int, message: Message, attempts: int, reason: str) -> int | None:
        """park_message: only in the stored epoch; a repeated park adds its attempts and keeps
        the row's replay request."""
        await self._turn_to_write()
        if not self._leads("park", also=epoch == self.epoch):
            return None
        row = self.parked.get(message.position)
        if row is None:
            row = self.parked[message.position] = ParkedRow(message, 0, reason, self._now())
        row.attempts += attempts
        row.last_error, row.parked_at = reason, self._now()
        self.journal.append(Parked(message.at, row.attempts))
        return row.attempts

    async def repark_replayed(
        self, request: ReplayRequest, attempts: int, reason: str
    ) -> int | None:
        """repark_replayed_message: whatever the epoch; clears the request it read, not a
        later one; nothing when the row was purged meanwhile."""
        await self._turn_to_write()
        row = self.parked.get(request.message.position)
        if not self._leads("repark_replayed", also=row is not None):
            return None
        assert row is not None
        row.attempts += attempts
        row.last_error, row.parked_at = reason, self._now()
        if row.replay_requested_at is not None and row.replay_requested_at <= request.requested_at:
            row.replay_requested_at = None
        self.journal.append(Parked(row.message.at, row.attempts))
        return row.attempts

    async def unpark(self, position: Position, parked_at: datetime.datetime) -> bool:
        """unpark_message: only the row the replay read (a newer park of it stays)."""
        await self._turn_to_write()
        row = self.parked.get(position.position)
        if not self._leads("unpark", also=row is not None and row.parked_at == parked_at):
            return False
        del self.parked[position.position]
        self.journal.append(Unparked(position))
        return True

    async def settle_skip_request(self, request: SkipRequest) -> bool:
        """settle_skip_request: clears that very request once the stored checkpoint reached
        it or a seek voided it."""
        settles = self.skip_request == request and (
            request.epoch < self.epoch or self.checkpoint >= request.to
        )
        if not self._leads("settle_skip_request", also=settles):
            return False
        self.skip_request = None
        return True

    # -------------------------------------------------------------------------------------

    async def _turn_to_write(self) -> None:
        self.writes_waiting += 1
        try:
            await self._writes_flow.wait()
        finally:
            self.writes_waiting -= 1

    def _leads(self, statement: str, *, also: bool = True) -> bool:
        """The fencing every lease statement applies (token and holder), and the statement's
        own condition; the call is recorded with whether it was accepted."""
        accepted = self.lease_token == self.lease.token and also
        self.calls.append((statement, accepted))
        return accepted

    def _now(self) -> datetime.datetime:
        """clock_timestamp(): strictly later at each call, so rows' parked_at tell apart."""
        self._clock += datetime.timedelta(milliseconds=1)
        return self._clock
