"""Validation and encoding of messages before they reach SQL.

Everything a database constraint would reject is refused here first, with the field named, so
a bad append never aborts the caller's business transaction.
"""

import unicodedata
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from outbox.encoding import JsonDefault, encode_json, json_default
from outbox.errors import InvalidMessageError
from outbox.names import MAX_NAME_LENGTH


@dataclass(frozen=True, slots=True)
class NewMessage:
    """One message for `append_many`."""

    message_type: str
    data: Any
    message_id: str | None = None
    partition_key: str | None = None
    headers: Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class EncodedMessage:
    """A validated message, its JSON already encoded as text for a `::jsonb` cast."""

    message_id: str
    message_type: str
    partition_key: str | None
    data: str
    headers: str
    # True when the caller gave no message_id: a fresh UUID cannot collide, so the insert
    # needs no ON CONFLICT probe of the unique index.
    generated_id: bool


# Characters that do not show as themselves: controls (Cc: tabs, newlines, the rest of C0 and
# C1, DEL), format characters (Cf: bidi overrides, zero-width spaces and joiners), and line and
# paragraph separators (Zl, Zp). Surrogates (Cs) are refused earlier, as unstorable.
_HIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp"})

_CATEGORY_NAMES = {
    "Cc": "a control character",
    "Cf": "an invisible format character",
    "Zl": "a line separator",
    "Zp": "a paragraph separator",
    "Cs": "a lone surrogate",
}


def check_text(field: str, value: object) -> str:
    """A message type, id or key: non-empty text PostgreSQL can store, within the limit."""
    if not isinstance(value, str):
        raise InvalidMessageError(field, value, f"must be a str, not {type(value).__name__}")
    if not value:
        raise InvalidMessageError(field, value, "must not be empty")
    if len(value) > MAX_NAME_LENGTH:
        raise InvalidMessageError(
            field, value, f"is {len(value)} characters long; the limit is {MAX_NAME_LENGTH}"
        )
    if "\x00" in value:
        raise InvalidMessageError(field, value, "contains \\u0000, which PostgreSQL text refuses")
    # isascii() reads a flag the string already carries; only other text can hold a surrogate.
    if not value.isascii():
        try:
            value.encode()
        except UnicodeEncodeError as error:
            reason = f"{_found(value, error.start)}, which UTF-8 cannot encode"
            raise InvalidMessageError(field, value, reason) from None
    return value


def check_name(field: str, value: object) -> str:
    """A publication or subscription name: storable text that shows as what it is.

    Operators type these names and read them in logs and listings, so a name must not hide
    anything: no control or invisible format characters, no line breaks, no whitespace at the
    ends. Quotes, semicolons and markup-like text such as `[/]` are fine (all SQL is
    parameterised, and printing escapes markup elsewhere).
    """
    name = check_text(field, value)
    # isprintable() is one pass in C and true for every ordinary name. It is also false for
    # characters a name may hold (no-break spaces, private use, unassigned), so the scan decides.
    if not name.isprintable():
        for index, character in enumerate(name):
            if unicodedata.category(character) in _HIDDEN_CATEGORIES:
                reason = f"{_found(name, index)}; a name must show as what it is"
                raise InvalidMessageError(field, name, reason)
    if name[0].isspace() or name[-1].isspace():
        reason = "is only whitespace" if name.isspace() else "starts or ends with whitespace"
        raise InvalidMessageError(field, name, reason)
    return name


def _found(text: str, index: int) -> str:
    character = text[index]
    kind = _CATEGORY_NAMES[unicodedata.category(character)]
    return f"contains {kind} (U+{ord(character):04X}) at index {index}"


def encode_message(
    message: NewMessage,
    *,
    max_payload_bytes: int,
    default: JsonDefault = json_default,
    field_prefix: str = "",
) -> EncodedMessage:
    """Validate and encode one message; `field_prefix` locates it inside a batch."""
    message_type = check_text(f"{field_prefix}message_type", message.message_type)
    generated_id = message.message_id is None
    message_id = (
        str(uuid.uuid4())
        if message.message_id is None
        else check_text(f"{field_prefix}message_id", message.message_id)
    )
    partition_key = (
        None
        if message.partition_key is None
        else check_text(f"{field_prefix}partition_key", message.partition_key)
    )
    if message.headers is None:
        headers = "{}"
    elif isinstance(message.headers, Mapping):
        headers = encode_json(f"{field_prefix}headers", dict(message.headers), default)
    else:
        raise InvalidMessageError(
            f"{field_prefix}headers", message.headers, "must be a mapping of names to JSON values"
        )
    data = encode_json(f"{field_prefix}data", message.data, default)
    size = len(data.encode()) + len(headers.encode())
    if size > max_payload_bytes:
        raise InvalidMessageError(
            f"{field_prefix}data",
            f"<{size} bytes of JSON>",
            f"data and headers take {size} bytes; the limit is {max_payload_bytes}"
            " (OUTBOX_MAX_PAYLOAD_BYTES)",
        )
    return EncodedMessage(message_id, message_type, partition_key, data, headers, generated_id)
