"""What every target sends: the payload as its JSON text, and the same named fields.

A consumer on any broker reads the same names, so moving a consumer from one broker to
another changes its client, not its parsing. The message's own headers travel too, as JSON
text under `outbox-headers` (brokers' header values are strings, and a nested header would
otherwise be flattened differently by each).
"""

from poller.message import Message

MESSAGE_ID = "outbox-message-id"
MESSAGE_TYPE = "outbox-message-type"
PUBLICATION = "outbox-publication"
PARTITION_KEY = "outbox-partition-key"
POSITION = "outbox-position"
APPENDED_AT = "outbox-appended-at"
HEADERS = "outbox-headers"


def message_id(message: Message) -> str:
    """The outbox message id, or, for a message written without one, an id made from where
    it sits (stable across re-deliveries, so broker de-duplication still works)."""
    return message.message_id or f"{message.publication}:{message.at}"


def payload(message: Message) -> bytes:
    return message.data_text.encode()


def metadata(message: Message) -> dict[str, str]:
    """The named fields, each a string; a keyless message has no outbox-partition-key."""
    fields = {
        MESSAGE_ID: message_id(message),
        MESSAGE_TYPE: message.message_type,
        PUBLICATION: message.publication,
        POSITION: str(message.at),
        APPENDED_AT: message.appended_at.isoformat(),
        HEADERS: message.headers_text,
    }
    if message.partition_key is not None:
        fields[PARTITION_KEY] = message.partition_key
    return fields
