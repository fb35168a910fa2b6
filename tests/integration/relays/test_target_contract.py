"""The promises every target keeps, one suite that each target's class subclasses: the
exactly-once targets (NATS JetStream, Redis Streams) keep every distinct message, with its id
exact, and take a rebuilt stream's messages again once the operator bumps dedup_generation."""

import asyncio
from collections.abc import Callable, Iterator, Sequence
from typing import ClassVar

import pytest

from outbox_relays.kinds import open_target
from poller.message import Message
from tests.support import brokers
from tests.support.broker_streams import Destination, nats_stream, redis_stream
from tests.support.relay_messages import made_messages


def publish(url: str, messages: Sequence[Message]) -> None:
    async def published() -> None:
        target = open_target(url)
        try:
            assert await target.publish(messages) == {}
        finally:
            await target.close()

    asyncio.run(published())


class ExactlyOnceContract:
    make: ClassVar[Callable[[], Destination]]

    @pytest.fixture
    def destination(self) -> Iterator[Destination]:
        made = type(self).make()
        brokers.require(made.broker)
        yield made
        made.remove()

    def url(self, destination: Destination, query: str = "") -> str:
        return destination.url(destination.broker[2]) + query

    def test_distinct_messages_with_alike_ids_are_all_kept_exactly(
        self, destination: Destination
    ) -> None:
        # Ids are unique per publication only, and a client may fold or strip white space.
        orders = made_messages(3, message_ids=["order-1", "order-2", "x\ny"])
        billing = made_messages(
            3,
            publication="billing",
            first_transaction=2000,
            message_ids=["order-1", "order-2 ", "x y"],
        )
        publish(self.url(destination), orders + billing)
        held = [message_id for _, _, message_id in destination.read()]
        assert held == ["order-1", "order-2", "x\ny", "order-1", "order-2 ", "x y"]

    def test_a_rebuilt_stream_takes_everything_again_under_a_new_generation(
        self, destination: Destination
    ) -> None:
        messages = made_messages(5)
        publish(self.url(destination), messages)
        destination.wipe()
        # What the broker keeps of de-duplication outlives the entries: nothing comes back...
        publish(self.url(destination), messages)
        assert destination.read() == []
        # ...until the operator bumps the generation, as the README's rebuild steps say.
        publish(self.url(destination, "&dedup_generation=1"), messages)
        assert [entry[0] for entry in destination.read()] == [str(m.at) for m in messages]
        publish(self.url(destination, "&dedup_generation=1"), messages)
        assert len(destination.read()) == 5


class TestNats(ExactlyOnceContract):
    make = staticmethod(nats_stream)


class TestRedis(ExactlyOnceContract):
    make = staticmethod(redis_stream)
