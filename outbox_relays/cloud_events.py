"""`format=cloudevents`: each message as a CloudEvent 1.0, in binary content mode where the
broker has headers (HTTP, NATS, AMQP) and in structured mode in Redis.

The event's attributes: `id`, the relay's de-duplication id (`fields.dedup_id`: exact and
unique across publications, so unique with `source` as CloudEvents asks); `source`,
`/outbox/<publication>` (percent-encoded); `type`, the message type; `time`, when it was
appended; `specversion` 1.0; `datacontenttype` application/json (the payload's JSON text is
the event's data); the Partitioning extension's `partitionkey` for a keyed message; and two
extensions of the outbox's, `outboxmessageid` (the message id as written) and
`outboxposition` (`TX:POS`). The message's own headers travel beside the event, as in the
default format (`fields.application_headers`): a `traceparent` among them is the broker's
native tracing header, as CloudEvents' Distributed Tracing extension now recommends.

Bindings: HTTP (`ce-` headers, percent-encoded as its binding says, Content-Type the data's),
NATS (`ce-` headers, `ce-datacontenttype` among them, percent-encoded likewise), RabbitMQ (the
CloudEvents SDK's RabbitMQ binding for AMQP 0-9-1: `ce-` headers as they are, the
content_type property the data's), Redis (no binding exists: one entry field `data` holding
the event in the JSON format, and `content-type: application/cloudevents+json`, as the
structured mode of the other bindings says).
"""

import urllib.parse

import orjson

from outbox_relays import fields
from poller.message import Message

DATA_CONTENT_TYPE = "application/json"
STRUCTURED_CONTENT_TYPE = "application/cloudevents+json"

_HEADER_SAFE = "".join(chr(c) for c in range(0x21, 0x7F) if chr(c) not in '"%')
"""What a CloudEvents header value keeps as it is (HTTP and NATS bindings): printable ASCII
but the double quote and the percent sign; space and everything else is percent-encoded."""


def attributes(message: Message, generation: int = 0) -> dict[str, str]:
    """The event's context attributes but datacontenttype, each as its string form."""
    appended = message.appended_at.isoformat()
    event = {
        "specversion": "1.0",
        "id": fields.dedup_id(message, generation),
        "source": "/outbox/" + urllib.parse.quote(message.publication, safe=""),
        "type": message.message_type,
        "time": appended.removesuffix("+00:00") + "Z" if appended.endswith("+00:00") else appended,
        "outboxmessageid": fields.message_id(message),
        "outboxposition": str(message.at),
    }
    if message.partition_key is not None:
        event["partitionkey"] = message.partition_key
    return event


def binary_headers(
    message: Message, generation: int = 0, *, percent_encoded: bool, content_type: bool
) -> dict[str, str]:
    """The `ce-` headers of binary mode; `content_type`: datacontenttype is one of them (NATS)
    rather than the protocol's own content type (HTTP, AMQP)."""
    event = attributes(message, generation)
    if content_type:
        event["datacontenttype"] = DATA_CONTENT_TYPE
    if percent_encoded:
        return {
            f"ce-{name}": urllib.parse.quote(value, safe=_HEADER_SAFE)
            for name, value in event.items()
        }
    return {f"ce-{name}": value for name, value in event.items()}


def structured(message: Message, generation: int = 0) -> str:
    """The event in CloudEvents' JSON format, its data the payload's JSON as PostgreSQL gave it."""
    event: dict[str, object] = {
        **attributes(message, generation),
        "datacontenttype": DATA_CONTENT_TYPE,
        "data": orjson.Fragment(message.data_text),
    }
    return orjson.dumps(event).decode()
