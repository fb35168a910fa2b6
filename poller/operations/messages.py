"""Reading a publication's messages: a tail, the newest ones, a snapshot-safe page."""

import datetime
from collections.abc import AsyncGenerator, Iterable
from typing import Any, NamedTuple

import psycopg

from outbox.positions import Position
from poller.catch_up.signals import Checkpoint
from poller.catch_up.stream import Item
from poller.catch_up.subscribe import subscribe
from poller.message import Message
from poller.operations.parked import no_parked_message
from poller.operations.places import parse_place
from poller.operations.subscriptions import get
from poller.store import operator_store
from poller.store.message_reads import read_batch
from poller.store.operator_store import OperatorStore

# A page shows at most this many: more is not read in a browser, and would load the database.
MAX_LATEST = 1000


class MessageExcerpt(NamedTuple):
    """A message as a page shows it: its payload and headers (JSON text) cut to the first
    characters asked for, with their whole lengths."""

    at: Position
    publication: str
    message_id: str
    message_type: str
    partition_key: str | None
    data_start: str
    data_length: int
    headers_start: str
    headers_length: int
    appended_at: datetime.datetime

    @classmethod
    def of(cls, row: operator_store.MessageExcerpt) -> "MessageExcerpt":
        return cls(
            row.at,
            row.publication,
            row.message_id,
            row.message_type,
            row.partition_key,
            row.data_start,
            row.data_length,
            row.headers_start,
            row.headers_length,
            row.appended_at,
        )


class ParkedExcerpt(NamedTuple):
    message: MessageExcerpt
    attempts: int
    last_error: str
    parked_at: datetime.datetime

    @classmethod
    def of(cls, row: operator_store.ParkedExcerpt) -> "ParkedExcerpt":
        return cls(MessageExcerpt.of(row.message), row.attempts, row.last_error, row.parked_at)


def tail(
    database_url: str,
    publication: str,
    *,
    start: str | Checkpoint,
    message_types: Iterable[str] | None = None,
    partition_key: str | None = None,
) -> AsyncGenerator[Item]:
    """`outbox tail`: the messages after `start` (start, end or a checkpoint), then live
    ones, with checkpoint signals (a catch-up subscription; see poller.subscribe)."""
    return subscribe(
        database_url,
        publication,
        start=start,
        message_types=message_types,
        partition_key=partition_key,
    )


def latest_messages(
    conn: psycopg.Connection[Any], publication: str, limit: int, shown: int
) -> list[MessageExcerpt]:
    """The newest messages of `publication` safe to read, at most `limit` (up to MAX_LATEST),
    in delivery order (the newest last, as a tail shows them), each payload and headers cut
    to their first `shown` characters in the database: only what is shown is read."""
    if not 1 <= limit <= MAX_LATEST:
        raise ValueError(f"limit {limit} is not from 1 to {MAX_LATEST}")
    newest_first = OperatorStore(conn).latest_messages(publication, limit, shown)
    return [MessageExcerpt.of(row) for row in reversed(newest_first)]


def parked_message_excerpt(
    conn: psycopg.Connection[Any], name: str, at: str, shown: int
) -> ParkedExcerpt:
    """The parked message at `at` (POS or TX:POS) as `parked_message` finds it, its payload
    and headers cut to their first `shown` characters in the database."""
    place = parse_place(at)
    get(conn, name)
    position = place if isinstance(place, int) else place.position
    found = OperatorStore(conn).parked_message_excerpt(name, position, shown)
    if found is None or (isinstance(place, Position) and found.message.at != place):
        raise no_parked_message(name, at)
    return ParkedExcerpt.of(found)


def read_messages(
    conn: psycopg.Connection[Any], publication: str, after: Position, limit: int
) -> list[Message]:
    """Up to `limit` committed messages after `after`, in delivery order: the daemon's
    snapshot-safe read (the demo races a naive one against it)."""
    return read_batch(conn, publication, after, limit)


def publications(conn: psycopg.Connection[Any], *, with_messages: bool) -> list[str]:
    """Every publication: with `with_messages`, those holding messages and those subscribed
    to; without (a role that may not read messages), those subscribed to."""
    return OperatorStore(conn).publications(with_messages=with_messages)
