"""The term store's contract (term_store_contract.py) kept by the in-memory fake the term's
unit tests drive; LeaderStore keeps the same on PostgreSQL
(tests/integration/test_leader_store_contract.py)."""

import pytest

from outbox.positions import Position
from poller.store.records import LeaseState, SkipRequest
from tests.unit.daemon.term_store_contract import TermStoreContract
from tests.unit.daemon.term_store_fake import FakeTermStore


class FakeWorld:
    """The fake plays the writers, the operator and the other processes itself."""

    def __init__(self) -> None:
        self.store = FakeTermStore()
        self._held: int | None = None

    async def append(self, *keys: str | None) -> list[Position]:
        return [message.at for message in self.store.append(*keys)]

    async def safe(self) -> None:
        pass  # the fake's committed messages are safe at once

    async def hold_frontier(self, key: str) -> int:
        self._held = self.store.open_transaction()
        self.store.append(key, transaction_id=self._held)
        return self._held

    async def commit_held(self) -> None:
        assert self._held is not None
        self.store.commit(self._held)

    async def checkpoint(self) -> Position:
        return self.store.checkpoint

    async def seek(self, to: Position) -> int:
        self.store.seek(to)
        return self.store.epoch

    async def request_replay(self) -> None:
        self.store.request_replay()

    async def request_skip(self, to: Position) -> SkipRequest:
        self.store.request_skip(to)
        assert self.store.skip_request is not None
        return self.store.skip_request

    async def purge_parked(self) -> None:
        self.store.parked.clear()

    async def take_lease_over(self) -> None:
        self.store.take_lease_over()

    async def renew(self) -> LeaseState | None:
        return await self.store.renew(self.store.lease.token or 0, None)


class TestFakeTermStore(TermStoreContract):
    @pytest.fixture
    def world(self) -> FakeWorld:
        return FakeWorld()
