"""Parked messages as operators handle them: found, listed, replayed, purged."""

import datetime
from collections.abc import Callable
from typing import Any, NamedTuple

import psycopg

from outbox.positions import START, Position
from poller.membership import ShardUnit
from poller.message import Message
from poller.operations.places import parse_place
from poller.operations.refusals import NotFoundError, RefusedValueError, SubscriptionError, quoted
from poller.operations.subscriptions import get
from poller.store.admin_store import AdminStore
from poller.store.message_reads import message_from_row


def parked_target(
    conn: psycopg.Connection[Any], name: str, at: str | None, message_id: str | None
) -> Position | None:
    """The parked message an operator names, by its place (POS or TX:POS) or by its message
    id in the subscription's publication; None when neither is given: every one."""
    if at is not None and message_id is not None:
        raise RefusedValueError("give a parked message's POSITION or its --id, not both")
    if at is not None:
        return parked_message(conn, name, at).message.at
    get(conn, name)
    if message_id is None:
        return None
    found = (
        None if "\x00" in message_id else AdminStore(conn).parked_position_by_id(name, message_id)
    )
    if found is None:
        raise NotFoundError(
            f"subscription {quoted(name)} has no parked message with id {quoted(message_id)}"
        )
    return found


class ReplayRequested(NamedTuple):
    marked: list[tuple[Position, ShardUnit]]
    """Each parked message asked for, and the shard whose leader replays it."""
    leader_alive: bool


def request_replay(
    conn: psycopg.Connection[Any], name: str, target: Position | None = None
) -> ReplayRequested:
    """Ask for the subscription's parked messages (every one, or the one at `target`) to be
    delivered again, ahead of the stream and without moving the checkpoint."""
    position = None if target is None else target.position
    return replay_marked(conn, name, lambda: AdminStore(conn).mark_for_replay(name, position))


def replay_marked(
    conn: psycopg.Connection[Any],
    name: str,
    mark: Callable[[], list[tuple[Position, ShardUnit]]],
) -> ReplayRequested:
    """Ask for a replay of the parked rows `mark` marks (it returns them).

    The request is a mark on each parked row: the leader of the message's shard replays the
    marked rows at its next lease renewal, or, while none leads, the next leader does before
    its first read. It stays until the replay ends (the row is deleted, or parked again), so
    it outlives a seek and a leader's crash.
    """
    record = get(conn, name)
    if record.kind is not None:
        raise SubscriptionError(
            f"subscription {quoted(name)} records a {record.kind} query's progress;"
            " it parks nothing"
        )
    store = AdminStore(conn)
    with conn.transaction():
        marked = mark()
        if marked:
            store.request_replay(name)
    return ReplayRequested(marked, store.leader_alive(name))


class ParkedRow(NamedTuple):
    """One line of `outbox parked list`; the field names are its JSON output's."""

    position: int
    transaction_id: int
    message_type: str
    message_id: str
    attempts: int
    last_error: str
    parked_at: datetime.datetime
    shard: int
    """The message's shard under the current shard count (0 for a plain subscription)."""
    replay_requested_at: datetime.datetime | None
    """When a replay was asked for that its shard's leader has not carried out yet."""


class ParkedMessage(NamedTuple):
    message: Message
    attempts: int
    last_error: str
    parked_at: datetime.datetime


def list_parked(
    conn: psycopg.Connection[Any], name: str, limit: int, after: Position = START
) -> list[ParkedRow]:
    """Up to `limit` parked messages after `after`, in delivery order (a page of them)."""
    get(conn, name)
    return [ParkedRow(*row) for row in AdminStore(conn).parked(name, limit, after)]


def _position_number(place: Position | int) -> int:
    return place if isinstance(place, int) else place.position


def parked_message(conn: psycopg.Connection[Any], name: str, at: str) -> ParkedMessage:
    """The parked message at `at`: POS, or TX:POS as `parked list` and status print it."""
    place = parse_place(at)
    get(conn, name)
    row = AdminStore(conn).parked_message(name, _position_number(place))
    found = None if row is None else ParkedMessage(message_from_row(row[:-3]), *row[-3:])
    if found is None or (isinstance(place, Position) and found.message.at != place):
        raise no_parked_message(name, at)
    return found


def no_parked_message(name: str, at: str) -> NotFoundError:
    return NotFoundError(f"subscription {quoted(name)} has no parked message at {quoted(at)}")


def purge_parked(conn: psycopg.Connection[Any], name: str, target: Position | None = None) -> int:
    """Drop the subscription's parked messages (every one, or the one at `target`) for good.
    A replay of it that runs meanwhile delivers it once more at most: if that fails, the
    message is not parked again (see TermWrites)."""
    get(conn, name)
    return AdminStore(conn).purge_parked(name, None if target is None else target.position)
