"""The subscription database's contract (tests/unit/daemon/subscription_database_contract.py)
kept by PostgresSubscriptionDatabase, the database the worker's and the coordinator's unit
tests fake, on a fresh database per case."""

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import psycopg
import pytest

from poller import operations
from poller.daemon.process.postgres_database import PostgresSubscriptionDatabase
from poller.store.leader_store import try_acquire
from poller.store.records import Lease
from tests.unit.daemon.subscription_database_contract import (
    PUBLICATION,
    SUBSCRIPTION,
    SubscriptionDatabaseContract,
)
from tests.unit.daemon.term_support import FAST

ELSEWHERE = "outbox-poller:elsewhere"


class PostgresWorld:
    """This process's database; the other process and the operator on sessions of their own
    (the other's named by its holder id, as a daemon's are)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._operator = psycopg.connect(url, autocommit=True)
        operations.create(self._operator, SUBSCRIPTION, PUBLICATION, "start", {})
        self.database = PostgresSubscriptionDatabase(
            url, None, SUBSCRIPTION, asyncio.Event(), options=FAST
        )
        self._elsewhere: list[psycopg.AsyncConnection[Any]] = []

    async def led_elsewhere(self, seconds: float, *, session_alive: bool = True) -> None:
        self._operator.execute(
            "UPDATE outbox.subscription_leaders SET expires_at = clock_timestamp()"
        )
        other = await psycopg.AsyncConnection.connect(
            self.url, autocommit=True, application_name=ELSEWHERE
        )
        assert await try_acquire(other, Lease(SUBSCRIPTION, ELSEWHERE, seconds)) is not None
        if session_alive:
            self._elsewhere.append(other)
        else:
            await other.close()
            # Its backend exits a moment after the connection closes.
            deadline = time.monotonic() + 10
            while self._operator.execute(
                "SELECT FROM pg_stat_activity WHERE application_name = %s", (ELSEWHERE,)
            ).fetchone():
                assert time.monotonic() < deadline, "the other session never ended"
                await asyncio.sleep(0.005)

    async def delete_subscription(self) -> None:
        operations.delete(self._operator, SUBSCRIPTION)

    async def close(self) -> None:
        await self.database.close()
        for other in self._elsewhere:
            await other.close()
        self._operator.close()


class TestPostgresSubscriptionDatabase(SubscriptionDatabaseContract):
    @pytest.fixture
    async def world(self, database_url: str) -> AsyncIterator[PostgresWorld]:
        world = PostgresWorld(database_url)
        yield world
        await world.close()
