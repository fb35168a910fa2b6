"""format=cloudevents: what each broker received is a CloudEvent 1.0 as the CloudEvents SDK
parses it (binary mode over HTTP, NATS and RabbitMQ, structured mode in Redis), its id
unique across publications, the message's own headers still beside it."""

import datetime
from collections.abc import Iterator
from typing import Any

import pytest
from cloudevents.core.base import BaseCloudEvent
from cloudevents.core.bindings import http, rabbitmq
from cloudevents.core.formats.json import JSONFormat

from outbox_relays import fields
from outbox_relays.kinds import open_target
from outbox_relays.target_url import RelayUrlError
from poller.message import Message
from tests.integration.relays.test_webhook_target import Receiver
from tests.support.broker_reads import READERS, Received, published
from tests.support.relay_messages import made_messages

HEADERS = '{"tenant": "acme", "Trace Me": " yes ", "n": 1.10}'


def messages() -> list[Message]:
    """Two messages with the same id in two publications, and a keyless one."""
    made = made_messages(1, message_ids=["order-1"]) + made_messages(
        1, publication="billing and more", first_transaction=2000, message_ids=["order-1"]
    )
    made += made_messages(1, key=None, first_transaction=3000, message_ids=["order 3"])
    for message in made:
        message._headers_text = HEADERS  # as read from PostgreSQL
    return made


def parsed(broker: str, received: Received) -> BaseCloudEvent:
    """As a consumer on that broker parses it with the CloudEvents SDK."""
    if broker == "rabbitmq":
        message = rabbitmq.RabbitMQMessage(
            headers={name: str(value) for name, value in received.headers.items()},
            content_type=received.content_type,
            body=received.body,
        )
        return rabbitmq.from_binary(message, JSONFormat())
    if broker == "redis":
        assert received.headers["content-type"] == "application/cloudevents+json"
        return JSONFormat().read(None, received.headers["data"])
    # HTTP's binding; NATS' is the same `ce-` headers, datacontenttype among them.
    return http.from_binary(http.HTTPMessage(received.headers, received.body), JSONFormat())


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    receiver = Receiver()
    yield receiver
    receiver.stop()


@pytest.mark.parametrize("broker", ["http", "nats", "rabbitmq", "redis"])
def test_each_broker_receives_a_cloudevent_the_sdk_parses(broker: str, receiver: Receiver) -> None:
    sent = messages()
    if broker == "http":
        published(receiver.url("format=cloudevents"), sent)
        got = [
            Received({name: r.header(name) for name in r.headers}, r.body)
            for r in receiver.requests
        ]
    else:
        got = READERS[broker](sent, "&format=cloudevents")
    events = [parsed(broker, received) for received in got]
    for message, event, received in zip(sent, events, got, strict=True):
        assert event.get_specversion() == "1.0"
        assert event.get_id() == fields.dedup_id(message)
        assert event.get_type() == message.message_type
        assert event.get_time() == message.appended_at
        assert event.get_datacontenttype() == "application/json"
        assert event.get_data() == message.data
        attributes: dict[str, Any] = event.get_attributes()
        assert attributes.get("partitionkey") == message.partition_key
        assert attributes["outboxposition"] == str(message.at)
        assert attributes["outboxmessageid"] == message.message_id
        assert fields.read_application_headers(received.headers) == message.headers
    assert [event.get_source() for event in events] == [
        "/outbox/orders",
        "/outbox/billing%20and%20more",
        "/outbox/orders",
    ]
    ids = [event.get_id() for event in events]
    assert len(set(ids)) == 3  # one message id, two publications: two events


def test_a_batch_of_posts_is_not_cloudevents_binary_mode() -> None:
    with pytest.raises(RelayUrlError, match="format=cloudevents takes mode=message"):
        open_target("http://127.0.0.1:9/hook?format=cloudevents&mode=batch")


def test_an_unknown_format_is_refused_at_start() -> None:
    with pytest.raises(RelayUrlError, match="format='json' must be outbox or cloudevents"):
        open_target("nats://127.0.0.1:4222?subject=s&format=json")


def test_a_time_in_another_zone_is_still_rfc_3339() -> None:
    from outbox_relays import cloud_events

    (message,) = made_messages(1)
    message.appended_at = datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)
    assert cloud_events.attributes(message)["time"] == "2026-01-02T03:04:05Z"
