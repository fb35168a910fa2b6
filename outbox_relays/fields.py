"""What every target sends: the payload as its JSON text, the same named fields, and the
message's own headers as the broker's native headers (NATS and HTTP headers, AMQP headers,
Redis entry fields).

A consumer on any broker reads the same names, so moving a consumer from one broker to
another changes its client, not its parsing. docs/envelope.md has the table of every field in
every target; `read_header_fields` and `read_application_headers` read them back.

Exact round trips, whatever the message holds:
- A value a protocol's headers would alter (NATS folds line breaks and strips white space at
  the ends; HTTP refuses both, and its receivers read header bytes as Latin-1, so UTF-8 beyond
  ASCII arrives garbled) goes percent-encoded (UTF-8), and `outbox-encoded` names the headers
  that are.
- An application header's value that is not a JSON string goes as its JSON text, exactly as
  PostgreSQL stored it (`1.10` stays `1.10`, a 30-digit integer stays whole), and
  `outbox-json` names those headers.
- An application header's name goes as it is when the target carries it unchanged and it is
  not one of the relay's or the protocol's own; otherwise percent-encoded (lower-case hex
  where header names are case-insensitive: HTTP, NATS). A name that collides with a field of
  the relay (`outbox-*`, CloudEvents' `ce-*`, Redis' `data`) or a header the protocol acts on
  (`Nats-*`, HTTP's `content-*`, `host`, ...; RabbitMQ's `CC`, `BCC`, `x-*`) has its first
  character encoded, so it arrives distinct and decodes back exactly: nothing is dropped or
  overwritten. A name holding `%` always goes encoded, so a name with `%` is an encoded one.
- `outbox-header-names` lists the application's headers, as sent, so a consumer tells them
  from the headers its client or the broker adds.
"""

import json
import re
import urllib.parse
from collections.abc import Mapping
from typing import Any, NamedTuple

from poller.message import Message

MESSAGE_ID = "outbox-message-id"
MESSAGE_TYPE = "outbox-message-type"
PUBLICATION = "outbox-publication"
PARTITION_KEY = "outbox-partition-key"
POSITION = "outbox-position"
APPENDED_AT = "outbox-appended-at"
ENCODED = "outbox-encoded"
HEADER_NAMES = "outbox-header-names"
JSON_VALUES = "outbox-json"

_HEADER_EXACT = re.compile(r"(?:[^\x00-\x1f\x7f\s]+(?:[ \t]+[^\x00-\x1f\x7f\s]+)*)?")
"""A value NATS headers carry as they are (nats-py writes and reads them as UTF-8): no control
character (a line break, a NUL), no white space at either end."""

_HTTP_EXACT = re.compile(r"(?:[\x21-\x7e]+(?:[ \t]+[\x21-\x7e]+)*)?")
"""A value an HTTP receiver reads as it was sent: printable ASCII, no white space at either
end. HTTP gives header bytes beyond ASCII no encoding (RFC 9110 5.5: obs-text), and servers
read them as Latin-1 (Python's http.server, Starlette, Node), so UTF-8 would arrive garbled."""

_TOKEN_MARKS = "!#$&'*+-.^_`|~"
"""An HTTP token's characters besides letters and digits (RFC 9110), without '%'."""


class Naming(NamedTuple):
    """How one target names the application's headers, and which values it carries as
    they are."""

    keeps: re.Pattern[str]
    """Names the target carries as they are."""
    lower_hex: bool
    """Header names are case-insensitive there: percent-encoding uses lower-case hex."""
    reserved_prefixes: tuple[str, ...]
    """Lower-case prefixes of names that are the relay's or the protocol's."""
    reserved: frozenset[str]
    """Names that are the relay's or the protocol's, compared as `reserved_folded` says."""
    reserved_folded: bool = True
    values_kept: re.Pattern[str] = _HEADER_EXACT
    """Values the target's headers carry as they are (`header_fields` encodes the others)."""


_RELAYS_OWN = ("outbox-", "ce-")

HTTP_NAMES = Naming(
    re.compile(f"[a-z0-9{re.escape(_TOKEN_MARKS)}]+"),
    lower_hex=True,
    reserved_prefixes=(*_RELAYS_OWN, "content-", "proxy-"),
    reserved=frozenset(
        {"host", "connection", "keep-alive", "te", "trailer", "transfer-encoding", "upgrade"}
        | {"expect", "authorization", "cookie"}
    ),
    values_kept=_HTTP_EXACT,
)
NATS_NAMES = HTTP_NAMES._replace(
    reserved_prefixes=(*_RELAYS_OWN, "nats-"), reserved=frozenset(), values_kept=_HEADER_EXACT
)
AMQP_NAMES = Naming(
    re.compile(r"[^%,]+"),
    lower_hex=False,
    reserved_prefixes=(*_RELAYS_OWN, "x-"),
    reserved=frozenset({"CC", "BCC"}),  # RabbitMQ's sender-selected distribution
    reserved_folded=False,
)
REDIS_NAMES = AMQP_NAMES._replace(
    reserved_prefixes=_RELAYS_OWN, reserved=frozenset({"data", "content-type"})
)


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
    }
    if message.partition_key is not None:
        fields[PARTITION_KEY] = message.partition_key
    return fields


def application_headers(message: Message, naming: Naming) -> dict[str, str]:
    """The message's own headers as the target's names and string values, with
    outbox-header-names and outbox-json (each absent when it would be empty)."""
    sent: dict[str, str] = {}
    json_values: list[str] = []
    for name, value, is_json in header_texts(message.headers_text):
        as_sent = _sent_name(name, naming)
        sent[as_sent] = value
        if is_json:
            json_values.append(as_sent)
    if sent:
        sent[HEADER_NAMES] = ",".join(sent)
    if json_values:
        sent[JSON_VALUES] = ",".join(json_values)
    return sent


def header_fields(
    message: Message, naming: Naming = NATS_NAMES, own: Mapping[str, str] | None = None
) -> dict[str, str]:
    """`own` fields (`metadata` unless given) and the application's headers, for a
    protocol's headers: each value a header would alter (`naming.values_kept`)
    percent-encoded, and named in outbox-encoded (absent when none is)."""
    fields = {**(metadata(message) if own is None else own), **application_headers(message, naming)}
    encoded = [name for name, value in fields.items() if not naming.values_kept.fullmatch(value)]
    for name in encoded:
        fields[name] = _quoted(fields[name])
    if encoded:
        fields[ENCODED] = ",".join(encoded)
    return fields


def read_header_fields(headers: Mapping[str, str]) -> dict[str, str]:
    """The outbox-* fields as `metadata` made them, from headers or fields a target sent
    (for consumers and tests)."""
    fields = {name: value for name, value in headers.items() if name.startswith("outbox-")}
    for name in fields.pop(ENCODED, "").split(","):
        if name in fields:  # an application's header is read by read_application_headers
            fields[name] = urllib.parse.unquote(fields[name])
    for listing in (HEADER_NAMES, JSON_VALUES):
        fields.pop(listing, None)
    return fields


def read_application_headers(headers: Mapping[str, Any]) -> dict[str, Any]:
    """The message's own headers exactly as appended, from the headers (or entry fields) a
    target sent: for consumers. Names are looked up without regard to case where the
    client folded them."""
    folded = {str(name).lower(): value for name, value in headers.items()}

    def get(name: str) -> Any:
        return headers[name] if name in headers else folded.get(name.lower())

    def listed(name: str) -> set[str]:
        return {n.lower() for n in _text(get(name)).split(",") if n}

    encoded, json_values = listed(ENCODED), listed(JSON_VALUES)
    found: dict[str, Any] = {}
    for name in filter(None, _text(get(HEADER_NAMES)).split(",")):
        value = _text(get(name))
        if name.lower() in encoded:
            value = urllib.parse.unquote(value)
        found[urllib.parse.unquote(name)] = (
            json.loads(value) if name.lower() in json_values else value
        )
    return found


_DECODER = json.JSONDecoder()
"""Stateless once made: one for every message's headers, not one per message."""


def header_texts(headers_text: str) -> list[tuple[str, str, bool]]:
    """Each header of a message's headers (PostgreSQL's jsonb text of one JSON object): its
    name, its value (a string's, or the JSON text of any other value, exactly as stored),
    and whether that is JSON text."""
    found: list[tuple[str, str, bool]] = []
    if headers_text == "{}":  # most messages: PostgreSQL's text of an empty jsonb object
        return found
    at = _skip(headers_text, 0)
    assert headers_text[at] == "{", "headers are a JSON object"
    at = _skip(headers_text, at + 1)
    while headers_text[at] != "}":
        name, at = _DECODER.raw_decode(headers_text, at)
        at = _skip(headers_text, _skip(headers_text, at) + 1)  # past the ':'
        start = at
        value, at = _DECODER.raw_decode(headers_text, at)
        if isinstance(value, str):
            found.append((name, value, False))
        else:
            found.append((name, headers_text[start:at], True))
        at = _skip(headers_text, at)
        if headers_text[at] == ",":
            at = _skip(headers_text, at + 1)
    return found


def _skip(text: str, at: int) -> int:
    while text[at] in " \t\n\r":
        at += 1
    return at


def _sent_name(name: str, naming: Naming) -> str:
    reserved = name.lower() if naming.reserved_folded else name
    if naming.keeps.fullmatch(name) and not (
        reserved in naming.reserved or reserved.lower().startswith(naming.reserved_prefixes)
    ):
        return name
    encoded = "".join(
        character if naming.keeps.fullmatch(character) else _percent(character, naming)
        for character in name
    )
    if encoded == name:  # kept whole, yet the relay's or the protocol's: made distinct
        encoded = _percent(name[0], naming) + name[1:]
    return encoded


def _percent(character: str, naming: Naming) -> str:
    hexes = character.encode().hex()
    hexes = hexes if naming.lower_hex else hexes.upper()
    return "".join(f"%{hexes[i : i + 2]}" for i in range(0, len(hexes), 2))


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else "" if value is None else str(value)


def _quoted(text: str) -> str:
    return urllib.parse.quote(text, safe="")
