"""The term store's contract (tests/unit/daemon/term_store_contract.py) kept by LeaderStore on
PostgreSQL, the store the term's unit tests fake, on a fresh database per case."""

import os
import time
from collections.abc import AsyncIterator
from typing import Any

import psycopg
import pytest

import outbox
from outbox.positions import START, Position
from poller import operations
from poller.membership import ONLY_SHARD
from poller.store.leader_store import LeaderStore, try_acquire
from poller.store.lease_renewal import HeldLease, renew_process_leases
from poller.store.message_reads import read_batch
from poller.store.records import Lease, LeaseState, SkipRequest
from tests.unit.daemon.term_store_contract import PUBLICATION, TermStoreContract

SUBSCRIPTION = "billing"
HOLDER = "outbox-poller:contract"


class PostgresWorld:
    """The leader's store on its own session (named by its holder id, as a daemon's is); the
    writers, the operator and the other process on sessions of their own."""

    def __init__(
        self, url: str, leader: psycopg.AsyncConnection[Any], conn: psycopg.Connection[Any]
    ) -> None:
        self.url = url
        self._leader = leader
        self.store = LeaderStore(leader, leader, Lease(SUBSCRIPTION, HOLDER, ttl_seconds=30))
        self._conn = conn  # autocommit: the writers' and the operator's
        self._held: psycopg.Connection[Any] | None = None
        self._appended: list[Position] = []

    @classmethod
    async def start(cls, url: str) -> "PostgresWorld":
        conn = psycopg.connect(url, autocommit=True)
        operations.create(conn, SUBSCRIPTION, PUBLICATION, "start", {})
        leader = await psycopg.AsyncConnection.connect(
            url, autocommit=True, application_name=HOLDER
        )
        world = cls(url, leader, conn)
        assert await try_acquire(leader, world.store.lease) == 0.0
        return world

    async def close(self) -> None:
        if self._held is not None:
            self._held.close()
        self._conn.close()
        await self._leader.close()

    def _append_one(self, conn: psycopg.Connection[Any], key: str | None) -> Position:
        position = outbox.append(conn, PUBLICATION, "OrderPlaced", {"key": key}, partition_key=key)
        row = conn.execute("SELECT pg_current_xact_id()::text::bigint").fetchone()
        assert row is not None
        return Position(row[0], position)

    async def append(self, *keys: str | None) -> list[Position]:
        appended = []
        for key in keys:
            with self._conn.transaction():
                appended.append(self._append_one(self._conn, key))
        self._appended += appended
        return appended

    async def safe(self) -> None:
        # Other tests' transactions on this server hold the safe frontier back a moment.
        deadline = time.monotonic() + 30
        while len(read_batch(self._conn, PUBLICATION, START, 10_000)) < len(self._appended):
            assert time.monotonic() < deadline, "the messages never became safe to read"
            time.sleep(0.005)

    async def hold_frontier(self, key: str) -> int:
        self._held = psycopg.connect(self.url)
        held = self._append_one(self._held, key)
        self._appended.append(held)
        return held.transaction_id

    async def commit_held(self) -> None:
        assert self._held is not None
        self._held.commit()

    async def checkpoint(self) -> Position:
        return operations.get(self._conn, SUBSCRIPTION).checkpoint

    async def seek(self, to: Position) -> int:
        _, epoch = operations.seek(self._conn, SUBSCRIPTION, str(to))
        return epoch

    async def request_replay(self) -> None:
        operations.request_replay(self._conn, SUBSCRIPTION)

    async def request_skip(self, to: Position) -> SkipRequest:
        operations.request_skip(self._conn, SUBSCRIPTION, str(to))
        pending = operations.skip_request(self._conn, SUBSCRIPTION)
        assert pending is not None
        return SkipRequest(pending.to, pending.epoch)

    async def purge_parked(self) -> None:
        operations.purge_parked(self._conn, SUBSCRIPTION)

    async def take_lease_over(self) -> None:
        # The leader's session stays open (paused, not gone); its lease expires.
        self._conn.execute("UPDATE outbox.subscription_leaders SET expires_at = clock_timestamp()")
        async with await psycopg.AsyncConnection.connect(
            self.url, autocommit=True, application_name="outbox-poller:other"
        ) as other:
            lease = Lease(SUBSCRIPTION, "outbox-poller:other", ttl_seconds=30)
            assert await try_acquire(other, lease) == 0.0

    async def renew(self) -> LeaseState | None:
        token = self.store.lease.token
        assert token is not None
        renewal = await renew_process_leases(
            self._leader,
            SUBSCRIPTION,
            HOLDER,
            "contract-host",
            os.getpid(),
            30.0,
            [HeldLease(ONLY_SHARD, token)],
            member=False,
        )
        assert renewal is not None
        return renewal.leases[ONLY_SHARD, token]


class TestLeaderStore(TermStoreContract):
    @pytest.fixture
    async def world(self, database_url: str) -> AsyncIterator[PostgresWorld]:
        world = await PostgresWorld.start(database_url)
        yield world
        await world.close()
