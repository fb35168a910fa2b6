"""What a leadership term may count on from its store (poller/store/term_store.py): one set of
cases that runs against the in-memory fake the term's unit tests use (term_store_fake.py,
test_term_store_contract.py) and against LeaderStore on PostgreSQL, the store it fakes
(tests/integration/test_leader_store_contract.py), so the fake cannot drift from the real one.

Each subclass gives a `world`: the store under test for one plain subscription, which holds
the lease, with the writers, the operator and the other processes around it. Time, sessions,
locks and shard layouts stay with the database tests: the fake has none of them.
"""

from typing import Protocol

from outbox.positions import START, Position
from poller.message import Message
from poller.store.records import LeaseState, SkipRequest
from poller.store.term_store import TermStore

PUBLICATION = "orders"


class TermStoreWorld(Protocol):
    @property
    def store(self) -> TermStore:
        """The store of the subscription's leader, which holds the lease."""

    async def append(self, *keys: str | None) -> list[Position]:
        """One message per key, each in a transaction of its own that commits."""

    async def safe(self) -> None:
        """Return once every committed message is safe to read (no other transaction of the
        server holds them back); the fake's are at once."""

    async def hold_frontier(self, key: str) -> int:
        """A transaction that appends one message and stays open, holding back every later
        transaction's; its id."""

    async def commit_held(self) -> None: ...

    async def checkpoint(self) -> Position:
        """The subscription's stored checkpoint."""

    async def seek(self, to: Position) -> int:
        """An operator's seek: the new epoch."""

    async def request_replay(self) -> None:
        """An operator asks for every parked message again."""

    async def request_skip(self, to: Position) -> SkipRequest: ...

    async def purge_parked(self) -> None: ...

    async def take_lease_over(self) -> None:
        """Another process takes the lease: the store's token is an old one from now on."""

    async def renew(self) -> LeaseState | None:
        """The process's renewal of the store's lease (renew_process_leases; the fake's, which
        renewals_fake.py's real renewer calls): the subscription as stored, or None once the
        lease is not the store's."""


async def messages(world: TermStoreWorld, after: Position = START) -> list[Message]:
    return await world.store.read_batch(PUBLICATION, after, 100)


async def places(world: TermStoreWorld, after: Position = START) -> list[Position]:
    return [message.at for message in await messages(world, after)]


class TermStoreContract:
    """The cases; a subclass defines the `world` fixture."""

    # Reads --------------------------------------------------------------------------------

    async def test_a_read_returns_messages_after_a_place_in_delivery_order_up_to_a_limit(
        self, world: TermStoreWorld
    ) -> None:
        appended = await world.append("a", None, "a", "b")
        await world.safe()
        assert await places(world) == appended
        assert [m.at for m in await world.store.read_batch(PUBLICATION, START, 2)] == appended[:2]
        assert await places(world, appended[1]) == appended[2:]
        assert await places(world, appended[-1]) == []

    async def test_rows_behind_a_running_transaction_are_hidden_until_it_commits(
        self, world: TermStoreWorld
    ) -> None:
        (before,) = await world.append("a")
        await world.safe()
        running = await world.hold_frontier("b")
        (later,) = await world.append("c")
        assert await places(world) == [before]
        # The running transaction's own row is not one the frontier hides: nobody sees it yet.
        hidden = await world.store.oldest_hidden_transaction(PUBLICATION, before)
        assert hidden == later.transaction_id != running
        await world.commit_held()
        await world.safe()
        read = await places(world)
        assert read[0] == before
        assert [p.transaction_id for p in read[1:]] == [running, later.transaction_id]
        assert await world.store.oldest_hidden_transaction(PUBLICATION, later) is None

    # Checkpoints --------------------------------------------------------------------------

    async def test_a_checkpoint_moves_forward_in_the_stored_epoch_and_never_back(
        self, world: TermStoreWorld
    ) -> None:
        first, second = await world.append("a", "b")
        assert await world.store.write_checkpoint(0, second, {})
        assert await world.store.write_checkpoint(0, second, {}), "the same place again"
        assert not await world.store.write_checkpoint(0, first, {})
        assert await world.checkpoint() == second
        assert not await world.store.write_checkpoint(1, second, {}), "an epoch not stored"

    async def test_a_write_issued_before_a_seek_is_refused_after_it(
        self, world: TermStoreWorld
    ) -> None:
        await world.append("a")
        await world.safe()
        (message,) = await messages(world)
        assert await world.seek(START) == 1
        assert not await world.store.write_checkpoint(0, message.at, {})
        assert await world.store.park(0, message, 1, "decided before the seek") is None
        assert await world.checkpoint() == START
        assert await world.store.park(1, message, 2, "parked in the new epoch") == 2
        assert await world.store.write_checkpoint(1, message.at, {})

    # Parked messages and their replays ----------------------------------------------------

    async def test_parks_add_up_and_a_replay_reads_the_requested_rows_in_delivery_order(
        self, world: TermStoreWorld
    ) -> None:
        await world.append("a", "b")
        await world.safe()
        first, second = await messages(world)
        assert await world.store.park(0, second, 1, "second") == 1
        assert await world.store.park(0, first, 2, "first") == 2
        assert await world.store.park(0, second, 3, "second again") == 4
        assert await world.store.replay_requests() == [], "nobody asked yet"
        await world.request_replay()
        requests = await world.store.replay_requests()
        assert [r.message.at for r in requests] == [first.at, second.at]
        assert [r.message.message_id for r in requests] == [first.message_id, second.message_id]

    async def test_a_failed_replay_clears_the_request_it_read_and_keeps_a_later_one(
        self, world: TermStoreWorld
    ) -> None:
        await world.append("a")
        await world.safe()
        (message,) = await messages(world)
        assert await world.store.park(0, message, 1, "first") == 1
        await world.request_replay()
        (first,) = await world.store.replay_requests()
        await world.seek(START)  # a replay outlives seeks
        assert await world.store.repark_replayed(first, 2, "failed again") == 3
        assert await world.store.replay_requests() == []

        await world.request_replay()
        (second,) = await world.store.replay_requests()
        await world.request_replay()  # asked again while the replay runs: it follows this one
        assert await world.store.repark_replayed(second, 1, "failed once more") == 4
        (third,) = await world.store.replay_requests()
        assert third.requested_at > second.requested_at
        assert third.parked_at > second.parked_at

    async def test_a_replay_purged_while_it_runs_is_not_parked_again(
        self, world: TermStoreWorld
    ) -> None:
        await world.append("a")
        await world.safe()
        (message,) = await messages(world)
        assert await world.store.park(0, message, 1, "first") == 1
        await world.request_replay()
        (replay,) = await world.store.replay_requests()
        await world.purge_parked()
        assert await world.store.repark_replayed(replay, 1, "failed again") is None
        assert not await world.store.unpark(message.at, replay.parked_at)
        assert await world.store.park(0, message, 1, "parked anew") == 1, "nothing was left"

    async def test_a_replay_deletes_only_the_parked_row_it_read(
        self, world: TermStoreWorld
    ) -> None:
        await world.append("a")
        await world.safe()
        (message,) = await messages(world)
        assert await world.store.park(0, message, 1, "first") == 1
        await world.request_replay()
        (read_by_the_replay,) = await world.store.replay_requests()
        # Meanwhile the message was read again and parked again: a newer row.
        assert await world.store.park(0, message, 1, "again") == 2
        assert not await world.store.unpark(message.at, read_by_the_replay.parked_at)
        await world.request_replay()
        (newer,) = await world.store.replay_requests()
        assert await world.store.unpark(message.at, newer.parked_at)
        assert await world.store.replay_requests() == []
        assert await world.store.park(0, message, 1, "parked anew") == 1, "the row is gone"

    # Skip requests ------------------------------------------------------------------------

    async def test_a_skip_request_is_settled_once_the_checkpoint_reaches_it(
        self, world: TermStoreWorld
    ) -> None:
        first, second = await world.append("a", "b")
        request = await world.request_skip(second)
        assert request == SkipRequest(second, 0)
        assert not await world.store.settle_skip_request(request), "not reached yet"
        assert await world.store.write_checkpoint(0, first, {})
        assert not await world.store.settle_skip_request(request), "still not reached"
        assert await world.store.write_checkpoint(0, second, {})
        assert await world.store.settle_skip_request(request)
        assert not await world.store.settle_skip_request(request), "it is gone"

    async def test_a_seek_voids_a_skip_request(self, world: TermStoreWorld) -> None:
        (only,) = await world.append("a")
        request = await world.request_skip(only)
        await world.seek(START)
        assert await world.store.settle_skip_request(request)

    # The lease ----------------------------------------------------------------------------

    async def test_a_former_leader_writes_nothing_after_a_takeover(
        self, world: TermStoreWorld
    ) -> None:
        await world.append("a", "b")
        await world.safe()
        first, second = await messages(world)
        assert await world.store.park(0, first, 1, "parked") == 1
        await world.request_replay()
        (replay,) = await world.store.replay_requests()
        request = await world.request_skip(second.at)
        await world.take_lease_over()

        assert not await world.store.write_checkpoint(0, second.at, {})
        assert await world.store.park(0, second, 1, "late") is None
        assert await world.store.repark_replayed(replay, 1, "late replay") is None
        assert not await world.store.unpark(first.at, replay.parked_at)
        assert not await world.store.settle_skip_request(request)
        assert await world.checkpoint() == START
        (unchanged,) = await world.store.replay_requests()
        assert (unchanged.message.at, unchanged.parked_at, unchanged.requested_at) == (
            replay.message.at,
            replay.parked_at,
            replay.requested_at,
        ), "the row is as it was"

    async def test_a_renewal_returns_the_subscription_as_stored(
        self, world: TermStoreWorld
    ) -> None:
        await world.append("a", "b")
        await world.safe()
        first, second = [m.at for m in await messages(world)]
        assert await world.renew() == LeaseState(0, START, {}, 0)
        await world.request_replay()
        assert await world.renew() == LeaseState(0, START, {}, 0), "nothing parked to ask for"
        assert await world.store.write_checkpoint(0, first, {"delivered": 1})
        (message,) = await messages(world, first)
        assert await world.store.park(0, message, 1, "parked") == 1
        await world.request_replay()
        request = await world.request_skip(second)
        assert await world.renew() == LeaseState(0, first, {}, 1, request)
        assert await world.seek(second) == 1
        assert await world.renew() == LeaseState(1, second, {}, 1, request)

    async def test_a_renewal_after_a_takeover_finds_nothing(self, world: TermStoreWorld) -> None:
        await world.take_lease_over()
        assert await world.renew() is None

    async def test_a_released_lease_writes_nothing(self, world: TermStoreWorld) -> None:
        await world.append("a")
        await world.safe()
        (message,) = await messages(world)
        await world.store.release()
        assert not await world.store.write_checkpoint(0, message.at, {})
        assert await world.store.park(0, message, 1, "after the release") is None
        assert await world.checkpoint() == START
