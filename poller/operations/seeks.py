"""`outbox seek`: moving a subscription's checkpoint to a place, a time or a message, every
shard with it, in a new epoch."""

import datetime
from typing import Any, NamedTuple

import psycopg

from outbox.positions import Position
from poller.operations.message_lookup import find_message
from poller.operations.places import resolve_start
from poller.operations.refusals import RefusedValueError, SubscriptionError, quoted
from poller.operations.retired_mark import as_typed, not_retired, past_mark
from poller.operations.subscriptions import Subscription, get, locked, refuse_while_draining
from poller.store.admin_store import AdminStore
from poller.store.archived_reads import history_floor


def seek(conn: psycopg.Connection[Any], name: str, to: str) -> tuple[Position, int]:
    return seek_at(conn, seek_target(conn, name, to=to))


class SeekTarget(NamedTuple):
    """Where a seek moves a subscription, before the retired-up-to mark is checked."""

    record: Subscription
    at: Position
    typed: str | None
    """How the operator typed it, to name it in a refusal; None when the command worked it out
    (`start`, a time, a message id), which the mark then raises instead (see not_retired)."""


def seek_target(
    conn: psycopg.Connection[Any],
    name: str,
    *,
    to: str | None = None,
    since: datetime.datetime | None = None,
    message_id: str | None = None,
) -> SeekTarget:
    """Where `outbox seek` would move `name`: after `to` (start, end or TX:POS), just before
    the first message appended at or after `since`, or just before the message `message_id`
    (exactly one of the three). Nothing is stored."""
    if sum(value is not None for value in (to, since, message_id)) != 1:
        raise RefusedValueError("give exactly one of --to, --to-time and --to-message")
    if since is not None:
        return _time_target(conn, name, since)
    record = get(conn, name)
    if message_id is not None:
        try:
            found = find_message(conn, record.publication, message_id=message_id)
        except SubscriptionError as error:
            raise SubscriptionError(f"--to-message: {error}") from None
        return SeekTarget(record, _just_before(conn, found.at), None)
    assert to is not None
    return SeekTarget(record, resolve_start(conn, to, option="--to"), as_typed("--to", to))


def seek_at(conn: psycopg.Connection[Any], target: SeekTarget) -> tuple[Position, int]:
    """Store the seek to `target` (refused past the retired-up-to mark, as not_retired says);
    the place stored and the new epoch."""
    record = target.record
    return _seek_not_retired(
        conn, record.subscription_id, record.publication, target.at, target.typed
    )


def seek_preview_place(conn: psycopg.Connection[Any], target: SeekTarget) -> Position:
    """Where `seek_at` would move the subscription now: `target`'s place, checked against the
    retired-up-to mark as the seek checks it (a typed place before it is refused), without
    storing or locking anything."""
    publication = target.record.publication
    return past_mark(history_floor(conn, publication), publication, target.at, target.typed)


def seek_to_time(
    conn: psycopg.Connection[Any], name: str, since: datetime.datetime
) -> tuple[Position, int]:
    """Delivery resumes with the first message, in delivery order, appended at or after
    `since` (appended_at: the writer transaction's start; commit times are not stored).
    Nothing appended at or after `since` is passed over; a few appended before it may follow."""
    return seek_at(conn, seek_target(conn, name, since=since))


def _time_target(conn: psycopg.Connection[Any], name: str, since: datetime.datetime) -> SeekTarget:
    if since.tzinfo is None:
        raise SubscriptionError(
            f"--to-time {quoted(since.isoformat())} has no UTC offset"
            " (write it as 2024-05-01T10:00:00+02:00 or ...Z)"
        )
    record = get(conn, name)
    found, now = AdminStore(conn).first_message_appended_since(record.publication, since)
    if since > now:
        raise SubscriptionError(
            f"--to-time {quoted(since.isoformat())} is in the future"
            f" (the database's clock says {now.isoformat()})"
        )
    return SeekTarget(record, _just_before(conn, found), None)


def seek_to_message(
    conn: psycopg.Connection[Any], name: str, message_id: str
) -> tuple[Position, int]:
    """Delivery resumes with the message `message_id` of the subscription's publication."""
    return seek_at(conn, seek_target(conn, name, message_id=message_id))


def _just_before(conn: psycopg.Connection[Any], found: Position | None) -> Position:
    """The checkpoint after which `found` is read first, but never past the safe frontier:
    a transaction still running below `found` may commit messages that belong before it.
    Without a message, the frontier (`end`) itself."""
    end = resolve_start(conn, "end")
    if found is None:
        return end
    return min(Position(found.transaction_id, found.position - 1), end)


def _seek_not_retired(
    conn: psycopg.Connection[Any], name: str, publication: str, at: Position, typed: str | None
) -> tuple[Position, int]:
    """A seek to `at` checked against the retired-up-to mark, in one transaction (a savepoint
    inside the caller's), so the lock `not_retired` takes holds until the seek is stored; on
    an autocommit connection LOCK TABLE would be refused outside a transaction."""
    with conn.transaction():
        return _seek_at(conn, name, not_retired(conn, publication, at, typed))


def _seek_at(conn: psycopg.Connection[Any], name: str, at: Position) -> tuple[Position, int]:
    """Every shard moves with the subscription's row, under its lock (see `locked`)."""
    refuse_while_draining(locked(conn, name), f"cannot seek {quoted(name)}")
    store = AdminStore(conn)
    epoch = store.seek(name, at)
    assert epoch is not None  # the row is locked: it cannot have gone
    store.seek_shards(name, at)
    return at, epoch
