"""The subscription database's contract (subscription_database_contract.py) kept by the
in-memory fake the worker's and the coordinator's unit tests drive;
PostgresSubscriptionDatabase keeps the same on PostgreSQL
(tests/integration/test_subscription_database_contract.py)."""

from collections.abc import AsyncIterator

import pytest

from tests.unit.daemon.subscription_database_contract import SubscriptionDatabaseContract
from tests.unit.daemon.subscription_database_fake import FakeSubscriptionDatabase


class FakeWorld:
    """The fake plays the other process and the operator itself."""

    def __init__(self) -> None:
        self.database = FakeSubscriptionDatabase()

    async def led_elsewhere(self, seconds: float, *, session_alive: bool = True) -> None:
        self.database.led_elsewhere(seconds=seconds, session_alive=session_alive)

    async def delete_subscription(self) -> None:
        self.database.delete_subscription()


class TestFakeSubscriptionDatabase(SubscriptionDatabaseContract):
    @pytest.fixture
    async def world(self) -> AsyncIterator[FakeWorld]:
        world = FakeWorld()
        yield world
        await world.database.close()
