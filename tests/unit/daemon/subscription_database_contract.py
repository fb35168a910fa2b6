"""What a subscription's coordinator and shard workers may count on from their database
(poller/daemon/process/subscription_database.py): one set of cases that runs against the
in-memory fake their unit tests use (subscription_database_fake.py,
test_subscription_database_contract.py) and against PostgresSubscriptionDatabase
(tests/integration/test_subscription_database_contract.py), so the fake cannot drift.

Each subclass gives a `world`: the database of this process for one plain subscription, and
the other process and the operator around it. The renewals are the renewer's and its own
tests'; the read server's checks and a restored copy's are the database tests'.
"""

import asyncio
from typing import Protocol

import psycopg.errors
import pytest

from outbox.positions import START
from poller.daemon.process.subscription_database import SubscriptionDatabase
from poller.membership import ONLY_SHARD, PLAIN_LAYOUT
from poller.store.records import Lease

SUBSCRIPTION = "billing"
PUBLICATION = "orders"
TTL = 30.0


class SubscriptionDatabaseWorld(Protocol):
    @property
    def database(self) -> SubscriptionDatabase:
        """This process's, for the plain subscription SUBSCRIPTION of PUBLICATION."""

    async def led_elsewhere(self, seconds: float, *, session_alive: bool = True) -> None:
        """Another process takes the lease (this one's expired first), for `seconds`; its
        session lives on, or is gone (killed, cut off)."""

    async def delete_subscription(self) -> None: ...


def lease_of(world: SubscriptionDatabaseWorld) -> Lease:
    return Lease(SUBSCRIPTION, world.database.holder, ttl_seconds=TTL)


class SubscriptionDatabaseContract:
    """The cases; a subclass defines the `world` fixture."""

    async def test_the_subscription_loads_as_its_shard_starts_it(
        self, world: SubscriptionDatabaseWorld
    ) -> None:
        lease = lease_of(world)
        membership = await world.database.membership(asyncio.Event())
        shard = await world.database.shard(lease, asyncio.Event())
        for record in (await membership.load_subscription(lease), await shard.load_subscription()):
            assert record is not None
            assert (record.subscription_id, record.publication) == (SUBSCRIPTION, PUBLICATION)
            assert (record.checkpoint, record.epoch, record.layout) == (START, 0, PLAIN_LAYOUT)
            assert record.replay_requests == 0

    async def test_a_free_lease_is_taken_and_taking_it_again_raises_its_token(
        self, world: SubscriptionDatabaseWorld
    ) -> None:
        assert world.database.not_before == {}
        lease = lease_of(world)
        shard = await world.database.shard(lease, asyncio.Event())
        assert await shard.try_acquire() == 0.0
        first = lease.token
        assert first is not None
        assert await shard.try_acquire() == 0.0, "one's own lease waits for nobody"
        assert lease.token is not None
        assert lease.token > first

    async def test_a_lease_held_elsewhere_is_refused_while_its_holder_lives(
        self, world: SubscriptionDatabaseWorld
    ) -> None:
        await world.led_elsewhere(TTL)
        shard = await world.database.shard(lease_of(world), asyncio.Event())
        assert await shard.try_acquire() is None

    async def test_a_lease_whose_holder_is_gone_is_taken_saying_how_long_it_had_left(
        self, world: SubscriptionDatabaseWorld
    ) -> None:
        await world.led_elsewhere(TTL, session_alive=False)
        shard = await world.database.shard(lease_of(world), asyncio.Event())
        left = await shard.try_acquire()
        assert left is not None
        assert TTL - 10 < left <= TTL

    async def test_an_expired_lease_is_taken_with_nothing_to_wait_for(
        self, world: SubscriptionDatabaseWorld
    ) -> None:
        await world.led_elsewhere(0.0)
        shard = await world.database.shard(lease_of(world), asyncio.Event())
        assert await shard.try_acquire() == 0.0

    async def test_a_term_writes_under_the_lease_it_took_until_it_is_taken_over_or_released(
        self, world: SubscriptionDatabaseWorld
    ) -> None:
        shard = await world.database.shard(lease_of(world), asyncio.Event())
        assert await shard.try_acquire() == 0.0
        async with shard.term_store(PLAIN_LAYOUT) as store:
            assert store.lease.unit == ONLY_SHARD
            assert await store.write_checkpoint(0, START, {})
            await world.led_elsewhere(TTL)
            assert not await store.write_checkpoint(0, START, {})
        assert await shard.try_acquire() is None

        again = await world.database.shard(lease_of(world), asyncio.Event())
        await world.led_elsewhere(0.0)
        assert await again.try_acquire() == 0.0
        await again.release()
        async with again.term_store(PLAIN_LAYOUT) as store:
            assert not await store.write_checkpoint(0, START, {})

    async def test_a_deleted_subscription_loads_as_none_and_its_lease_cannot_be_taken(
        self, world: SubscriptionDatabaseWorld
    ) -> None:
        lease = lease_of(world)
        membership = await world.database.membership(asyncio.Event())
        shard = await world.database.shard(lease, asyncio.Event())
        await world.delete_subscription()
        assert await membership.load_subscription(lease) is None
        assert await shard.load_subscription() is None
        with pytest.raises(psycopg.errors.ForeignKeyViolation):
            await shard.try_acquire()
