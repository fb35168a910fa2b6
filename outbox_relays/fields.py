"""What every target sends: the payload as its JSON text, and the same named fields.

A consumer on any broker reads the same names, so moving a consumer from one broker to
another changes its client, not its parsing. The message's own headers travel too, as JSON
text under `outbox-headers` (brokers' header values are strings, and a nested header would
otherwise be flattened differently by each).

Where the fields travel as headers of a protocol that would alter a value (NATS folds line
breaks and strips white space at the ends; HTTP refuses both), such a value goes
percent-encoded and `outbox-encoded` names the fields that are, so every value arrives exact:
`header_fields` makes them, `read_header_fields` reads them back.
"""

import re
import urllib.parse
from collections.abc import Mapping

from poller.message import Message

MESSAGE_ID = "outbox-message-id"
MESSAGE_TYPE = "outbox-message-type"
PUBLICATION = "outbox-publication"
PARTITION_KEY = "outbox-partition-key"
POSITION = "outbox-position"
APPENDED_AT = "outbox-appended-at"
HEADERS = "outbox-headers"
ENCODED = "outbox-encoded"

_HEADER_EXACT = re.compile(r"(?:[^\x00-\x1f\x7f\s]+(?:[ \t]+[^\x00-\x1f\x7f\s]+)*)?")
"""A value every header carries as it is: no control character (a line break, a NUL), no
white space at either end."""


def message_id(message: Message) -> str:
    """The outbox message id, or, for a message written without one, an id made from where
    it sits (stable across re-deliveries, so broker de-duplication still works)."""
    return message.message_id or f"{message.publication}:{message.at}"


def dedup_id(message: Message, generation: int = 0) -> str:
    """The id a broker de-duplicates by (NATS Msg-Id, the Redis marker): exact and unique
    across everything one stream can receive. A message id is unique only within its
    publication, so the publication is part of it; both are percent-encoded (no white space a
    client could fold, no ':' or '@'), joined by ':', which the encoding never yields. A
    message written without an id is `@` and its position. `generation` (a target's
    dedup_generation=) is bumped by an operator who rebuilds a stream, so ids published
    before are new again."""
    own = _quoted(message.message_id) if message.message_id else f"@{message.at}"
    unique = f"{_quoted(message.publication)}:{own}"
    return f"g{generation}:{unique}" if generation else unique


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


def header_fields(message: Message) -> dict[str, str]:
    """`metadata` for a protocol's headers: each value a header would alter percent-encoded,
    and named in outbox-encoded (absent when none is)."""
    fields = metadata(message)
    encoded = [name for name, value in fields.items() if not _HEADER_EXACT.fullmatch(value)]
    for name in encoded:
        fields[name] = _quoted(fields[name])
    if encoded:
        fields[ENCODED] = ",".join(encoded)
    return fields


def read_header_fields(headers: Mapping[str, str]) -> dict[str, str]:
    """The fields as `metadata` made them, from headers `header_fields` made (for consumers
    and tests)."""
    fields = {name: value for name, value in headers.items() if name.startswith("outbox-")}
    for name in filter(None, fields.pop(ENCODED, "").split(",")):
        fields[name] = urllib.parse.unquote(fields[name])
    return fields


def _quoted(text: str) -> str:
    return urllib.parse.quote(text, safe="")
