"""A message's own headers reach every broker as its native headers (NATS and HTTP headers,
AMQP headers, Redis entry fields), and a consumer on each reads back exactly what was
appended: non-string JSON values, names a protocol would fold or refuse, names that collide
with the relay's fields or the protocol's own headers."""

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

import outbox
from outbox.positions import START
from outbox_relays import fields
from poller.message import Message
from poller.store.message_reads import read_batch
from tests.integration.relays.test_webhook_target import Receiver
from tests.support.broker_reads import READERS, published
from tests.support.daemons import wait_until

HEADERS: dict[str, Any] = {
    "tenant": "acme",
    "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
    "Correlation-Id": "Mixed Case",  # HTTP and NATS fold a name's case
    "größe": "übergroß",  # HTTP receivers read header bytes as Latin-1
    "city": "東京",
    "with space": "  padded  ",  # NATS strips value ends; HTTP refuses them
    "line": "one\r\ntwo",
    "empty": "",
    "a,b": "a comma in a name",
    "100%": "a percent sign in a name",
    "quoted": '"x"',
    "looks like json": "42",
    "integer": 42,
    "huge": 123456789012345678901234567890,
    "decimal": 0.1,
    "yes": True,
    "nothing": None,
    "list": [1, "two", {"three": 3}],
    "object": {"nested": {"deep": [True, None]}},
    # The relay's own fields and what each protocol acts on: they must arrive distinct.
    "outbox-message-id": "not the relay's",
    "ce-id": "not a CloudEvents attribute",
    "data": "not Redis' payload field",
    "content-type": "text/plain",
    "Nats-Msg-Id": "not JetStream's de-duplication id",
    "Nats-Expected-Stream": "NOPE",
    "CC": "not RabbitMQ's sender-selected distribution",
    "x-delay": "5000",
    "host": "not the receiver's",
}


@pytest.fixture
def appended(database_url: str) -> Message:
    """The message as the daemon reads it from PostgreSQL (its headers as jsonb's text)."""
    with psycopg.connect(database_url) as conn:
        outbox.append(
            conn,
            "orders",
            "order.placed",
            {"n": 1},
            partition_key="schlüssel",
            message_id="bestellung-ü1",
            headers=HEADERS,
        )
    with psycopg.connect(database_url, autocommit=True) as conn:
        # Committed rows show once no older transaction of the cluster can still commit.
        read = wait_until(lambda: read_batch(conn, "orders", START, 10), 15, "the messages")
    (message,) = read
    return message


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    receiver = Receiver()
    yield receiver
    receiver.stop()


@pytest.mark.parametrize("broker", ["nats", "redis", "rabbitmq", "http"])
def test_a_consumer_reads_back_exactly_the_headers_appended(
    appended: Message, receiver: Receiver, broker: str
) -> None:
    if broker == "http":
        published(receiver.url(), [appended])
        (request,) = receiver.requests
        received: dict[str, Any] = request.header_values()  # as http.server read them
    else:
        received = READERS[broker]([appended])[0].headers
    assert fields.read_application_headers(received) == HEADERS
    assert fields.read_header_fields(received) == fields.metadata(appended)


def test_a_header_goes_under_its_own_name_where_the_protocol_keeps_it(appended: Message) -> None:
    """Native headers: a consumer that knows nothing of the encoding reads plain names."""
    sent = fields.header_fields(appended, fields.NATS_NAMES)
    assert sent["tenant"] == "acme"
    assert sent["traceparent"] == HEADERS["traceparent"]
    assert sent["integer"] == "42"
    assert sent["huge"] == "123456789012345678901234567890"  # exact, as PostgreSQL keeps it
    assert "Nats-Msg-Id" not in sent  # the relay's own, set by the NATS target alone
    assert "%4eats-%4dsg-%49d" in sent  # capitals encoded, in lower-case hex: folding keeps it
    assert "%6futbox-message-id" in sent  # a lower-case collision: its first character
    assert sent["outbox-message-id"] == fields.message_id(appended)
    amqp = fields.application_headers(appended, fields.AMQP_NAMES)
    assert amqp["Correlation-Id"] == "Mixed Case"  # AMQP keeps case: no encoding needed
    assert "CC" not in amqp
    assert "%43C" in amqp
