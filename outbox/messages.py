"""Validation and encoding of messages before they reach SQL.

Everything a database constraint would reject is refused here first, with the field named, so
a bad append never aborts the caller's business transaction.
"""

import os
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

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


class EncodedMessage(NamedTuple):
    """A validated message, its JSON already encoded as text for a `::jsonb` cast.

    A named tuple rather than a frozen dataclass: one is built per message on the hot path, and
    a frozen dataclass pays a Python-level `__setattr__` per field.
    """

    # None when the caller gave none: the writer then makes a fresh UUID, which cannot collide,
    # so the insert needs neither the duplicate lock nor the lookup.
    message_id: str | None
    message_type: str
    partition_key: str | None
    data: str
    headers: str


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


# A writer repeats a handful of publications and message types on every call. Both checks are
# pure functions of the text, so a str that passed once passes again and is not checked twice.
# The sets are bounded (emptied when full) so a writer inventing names cannot grow them forever.
_PASSED_NAMES: set[str] = set()
_PASSED_TEXTS: set[str] = set()
_MAX_REMEMBERED = 1024


def check_name_once(field: str, value: object) -> str:
    """`check_name`, skipped for a str that already passed it."""
    if type(value) is str and value in _PASSED_NAMES:
        return value
    return _remember(_PASSED_NAMES, check_name(field, value))


def check_text_once(field: str, value: object) -> str:
    """`check_text`, skipped for a str that already passed it."""
    if type(value) is str and value in _PASSED_TEXTS:
        return value
    return _remember(_PASSED_TEXTS, check_text(field, value))


def _remember(passed: set[str], text: str) -> str:
    # Only exact str: a subclass could compare equal to a name it does not spell.
    if type(text) is str:
        if len(passed) >= _MAX_REMEMBERED:
            passed.clear()
        passed.add(text)
    return text


def _found(text: str, index: int) -> str:
    character = text[index]
    kind = _CATEGORY_NAMES[unicodedata.category(character)]
    return f"contains {kind} (U+{ord(character):04X}) at index {index}"


def fresh_message_id() -> str:
    """A random (version 4) UUID as text, like str(uuid.uuid4()) at a third of the cost.

    uuid4() builds a UUID object through Python-level code before formatting it; a writer makes
    one per message, so the same 122 random bits are set and formatted directly.
    """
    random = bytearray(os.urandom(16))
    random[6] = random[6] & 0x0F | 0x40  # version 4
    random[8] = random[8] & 0x3F | 0x80  # the RFC 4122 variant
    text = random.hex()
    return f"{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:]}"


def encode_message(
    message_type: object,
    data: Any,
    message_id: object,
    partition_key: object,
    headers: object,
    *,
    max_payload_bytes: int,
    default: JsonDefault = json_default,
    field_prefix: str = "",
    trace_headers: Mapping[str, str] | None = None,
) -> EncodedMessage:
    """Validate and encode one message; `field_prefix` locates it inside a batch;
    `trace_headers` (the writer's trace context) join the headers, a header the caller gave
    under the same name winning: the caller said so.

    Takes the fields rather than a NewMessage, so a single append builds no object to hold them.
    """
    message_type = check_text_once(f"{field_prefix}message_type", message_type)
    if message_id is not None:
        message_id = check_text(f"{field_prefix}message_id", message_id)
    if partition_key is not None:
        partition_key = check_text(f"{field_prefix}partition_key", partition_key)
    if headers is None and not trace_headers:
        encoded_headers = "{}"
    elif headers is None or isinstance(headers, Mapping):
        given = dict(headers) if headers is not None else {}
        merged = {**trace_headers, **given} if trace_headers else given
        encoded_headers = encode_json(f"{field_prefix}headers", merged, default)
    else:
        raise InvalidMessageError(
            f"{field_prefix}headers", headers, "must be a mapping of names to JSON values"
        )
    encoded_data = encode_json(f"{field_prefix}data", data, default)
    size = _utf8_length(encoded_data) + _utf8_length(encoded_headers)
    if size > max_payload_bytes:
        raise InvalidMessageError(
            f"{field_prefix}data",
            f"<{size} bytes of JSON>",
            f"data and headers take {size} bytes; the limit is {max_payload_bytes}"
            " (OUTBOX_MAX_PAYLOAD_BYTES)",
        )
    return EncodedMessage(message_id, message_type, partition_key, encoded_data, encoded_headers)


def _utf8_length(text: str) -> int:
    # An ASCII string's length is its UTF-8 length; only other text needs encoding to count.
    return len(text) if text.isascii() else len(text.encode())
