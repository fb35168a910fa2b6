"""The promises every target keeps, one suite that each target's class subclasses: every
target (NATS JetStream, Redis Streams, RabbitMQ, a webhook) holds each message published, in
order, with its place, key and id, publishes again after a close, and says an unreachable
broker is unavailable without showing a password; the exactly-once targets (NATS JetStream,
Redis Streams) also keep every distinct message, with its id exact, and take a rebuilt
stream's messages again once the operator bumps dedup_generation. A further broker is one more
class, with a Destination of its own (tests/support/broker_streams.py)."""

import asyncio
from collections.abc import Callable, Iterator, Sequence
from typing import Any, ClassVar

import orjson
import pytest

from outbox_relays.kinds import open_target
from outbox_relays.target import BrokerUnavailable
from poller.message import Message
from tests.integration.relays.test_webhook_target import Receiver
from tests.support import brokers
from tests.support.broker_streams import (
    Destination,
    Entry,
    nats_stream,
    rabbitmq_queue,
    redis_stream,
)
from tests.support.relay_messages import made_messages


def publish(url: str, messages: Sequence[Message]) -> None:
    async def published() -> None:
        target = open_target(url)
        try:
            assert await target.publish(messages) == {}
        finally:
            await target.close()

    asyncio.run(published())


def entries(messages: Sequence[Message]) -> list[Entry]:
    return [(str(m.at), m.partition_key, m.message_id) for m in messages]


def webhook_receiver() -> Destination:
    """A receiver on 127.0.0.1 that takes every POST (as test_webhook_target.py's tests run
    it); an entry is what a POST's body names."""
    receiver = Receiver()

    def read() -> list[Entry]:
        bodies: list[Any] = []
        for request in receiver.requests:
            body = orjson.loads(request.body)
            bodies += body if isinstance(body, list) else [body]
        return [(b["position"], b["partition_key"], b["message_id"]) for b in bodies]

    return Destination(
        ("the webhook receiver", "127.0.0.1", receiver.port),
        lambda port: f"http://127.0.0.1:{port}/hooks/outbox",
        read,
        lambda: len(read()),
        receiver.stop,
        False,
    )


class TargetContract:
    make: ClassVar[Callable[[], Destination]]

    @pytest.fixture
    def destination(self) -> Iterator[Destination]:
        made = type(self).make()
        try:
            brokers.require(made.broker)
            yield made
        finally:
            made.remove()

    def url(self, destination: Destination, query: str = "") -> str:
        return destination.url(destination.broker[2]) + query

    def test_every_message_is_held_in_order_with_its_place_key_and_id(
        self, destination: Destination
    ) -> None:
        messages = made_messages(2, key="a") + made_messages(2, key="b", first_transaction=2000)
        publish(self.url(destination), messages)
        assert destination.read() == entries(messages)

    def test_a_closed_target_publishes_again(self, destination: Destination) -> None:
        first, second = made_messages(2)

        async def published_around_a_close() -> None:
            target = open_target(self.url(destination))
            try:
                await target.check()
                assert await target.publish([first]) == {}
                await target.close()
                assert await target.publish([second]) == {}
            finally:
                await target.close()

        asyncio.run(published_around_a_close())
        assert destination.read() == entries([first, second])

    def test_an_unreachable_broker_is_unavailable_and_no_password_shows(
        self, destination: Destination
    ) -> None:
        url = destination.url(1).replace("//", "//relay:hunter2@", 1).replace("guest:guest@", "")

        async def unavailable() -> list[str]:
            target = open_target(url)
            try:
                with pytest.raises(BrokerUnavailable) as raised:
                    await target.publish(made_messages(1))
            finally:
                await target.close()
            return [target.name, repr(target), str(raised.value), raised.value.reason]

        shown = asyncio.run(unavailable())
        assert [text for text in shown if "hunter2" in text] == []
        assert destination.read() == []


class ExactlyOnceContract(TargetContract):
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


class TestRabbitMQ(TargetContract):
    make = staticmethod(rabbitmq_queue)


class TestWebhook(TargetContract):
    make = staticmethod(webhook_receiver)
