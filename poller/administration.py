"""What operators do to subscriptions (the CLI's verbs), one short transaction each.

The rules live here (names, settings and positions are checked before anything is stored);
the SQL lives in the store.
"""

import datetime
import logging
import shlex
from collections.abc import Callable
from typing import Any, NamedTuple

import psycopg

from outbox.messages import check_name
from outbox.positions import MAX_PART, START, Position, at_frontier, readable
from outbox.shards import MAX_SHARDS
from poller.membership import ShardUnit
from poller.message import Message
from poller.store.admin_store import AdminStore
from poller.store.archived_reads import find_archived, history_floor
from poller.store.message_reads import message_from_row, safe_frontier
from poller.store.records import SkipRequest, SubscriptionRecord, settings_from_stored
from poller.store.retired_positions import lock_against_retirement

log = logging.getLogger(__name__)

# The largest bigint: a checkpoint at (frontier - 1, MAX_POSITION) is past every row of every
# transaction below the frontier, and before every row of transactions still running.
MAX_POSITION = MAX_PART

# Values quoted in errors are cut to this many characters: a 10 MB name must not become a
# 10 MB error line.
_QUOTED_LIMIT = 80


class SubscriptionError(ValueError):
    """An operator asked for something that cannot be done now; the message says why (a
    missing subscription, a position the database refuses, a change while one drains)."""


class NotFoundError(SubscriptionError):
    """What the operator named does not exist: a subscription, a message, a parked message.
    A front end that addresses things by name says so as such (the console answers 404)."""


class RefusedValueError(SubscriptionError):
    """A value refused for its form alone (not TX:POS, out of range): whatever the database
    holds, the command as typed can never work. The CLI exits 2 for it, 1 for the others."""


def quoted(value: str) -> str:
    """`value` as repr shows it, cut to a recognisable start when it is long."""
    shown = repr(value)
    if len(shown) <= _QUOTED_LIMIT:
        return shown
    return f"{shown[: _QUOTED_LIMIT - 3]}... ({len(value)} characters)"


def resolve_start(conn: psycopg.Connection[Any], start: str, option: str = "--from") -> Position:
    """`start`, `end` or TX:POS. `end` is the safe frontier, never the newest visible row: a
    transaction still open below the newest row would otherwise be skipped when it commits."""
    if start == "start":
        return START
    if start == "end":
        return at_frontier(safe_frontier(conn))
    try:
        at = Position.parse(start)
    except ValueError as error:
        reason = "out of range" if "out of range" in str(error) else "not start, end or TX:POS"
        raise RefusedValueError(
            f"{option} {quoted(start)} is {reason} (TX and POS are each at most {MAX_PART})"
        ) from None
    next_id = AdminStore(conn).next_transaction_id()
    if at.transaction_id >= next_id:
        # Every transaction from now on gets an id below it: the subscription would skip them all.
        raise SubscriptionError(
            f"{option} {quoted(start)}: transaction {at.transaction_id} has not happened yet"
            f" (the next transaction id is {next_id}); a checkpoint there would hide every"
            " message written from now on"
        )
    return at


def check_shard_count(shards: int) -> None:
    if not 1 <= shards <= MAX_SHARDS:
        raise RefusedValueError(f"--shards {shards} is not a shard count from 1 to {MAX_SHARDS}")


def create(
    conn: psycopg.Connection[Any],
    name: str,
    publication: str,
    start: str,
    settings: dict[str, Any],
    shards: int = 1,
) -> Position:
    """A subscription of `shards` shards (one: plain, its checkpoint in its own row alone),
    every shard starting after the same checkpoint."""
    check_name("subscription", name)
    check_name("publication", publication)
    check_shard_count(shards)
    settings_from_stored(settings)  # refuse bad settings before storing them
    with conn.transaction():  # the mark's check and the insert, under one lock (_not_retired)
        at = _not_retired(conn, publication, resolve_start(conn, start), _typed("--from", start))
        store = AdminStore(conn)
        if not store.insert_subscription(name, publication, at, settings, shards):
            raise SubscriptionError(f"subscription {quoted(name)} already exists")
        if shards > 1:
            store.insert_shards(name, shards, at)
    return at


def _missing(name: str) -> NotFoundError:
    return NotFoundError(f"subscription {quoted(name)} does not exist")


def _checked_lookup(name: str) -> str:
    """PostgreSQL text cannot hold NUL, so no stored name has one; the query would fail."""
    if "\x00" in name:
        raise _missing(name)
    return name


def get(conn: psycopg.Connection[Any], name: str) -> SubscriptionRecord:
    record = AdminStore(conn).subscription(_checked_lookup(name))
    if record is None:
        raise _missing(name)
    return record


def list_all(conn: psycopg.Connection[Any]) -> list[SubscriptionRecord]:
    return AdminStore(conn).subscriptions()


def locked(conn: psycopg.Connection[Any], name: str) -> SubscriptionRecord:
    """The subscription, its row locked until the caller's transaction ends: changes of its
    shard layout (a change of the count, a seek, the daemon's end of a drain) queue up."""
    record = AdminStore(conn).lock_subscription(_checked_lookup(name))
    if record is None:
        raise _missing(name)
    return record


def refuse_while_draining(record: SubscriptionRecord, refused: str) -> None:
    """While a change of the shard count drains, its layout must hold still: a seek would move
    the old shards back behind the barrier while new ones may already run after it, and a
    second change would need a barrier of its own before this one's has been reached."""
    layout = record.layout
    if layout.draining_shard_count is None or layout.barrier is None:
        return
    name = record.subscription_id
    raise SubscriptionError(
        f"{refused}: a change of {quoted(name)} to {layout.shard_count} shards is still"
        f" draining (its {layout.draining_shard_count} old shards deliver up to"
        f" {readable(layout.barrier)}); see it with `outbox subscription show {shlex.quote(name)}`"
        " and try again once it has ended"
    )


def delete(conn: psycopg.Connection[Any], name: str) -> None:
    if not AdminStore(conn).delete_subscription(_checked_lookup(name)):
        raise _missing(name)


def update_settings(conn: psycopg.Connection[Any], name: str, changes: dict[str, Any]) -> None:
    merged = {**get(conn, name).stored_settings, **changes}
    settings_from_stored(merged)
    AdminStore(conn).replace_settings(name, merged)


def seek(conn: psycopg.Connection[Any], name: str, to: str) -> tuple[Position, int]:
    return seek_at(conn, seek_target(conn, name, to=to))


class SeekTarget(NamedTuple):
    """Where a seek moves a subscription, before the retired-up-to mark is checked."""

    record: SubscriptionRecord
    at: Position
    typed: str | None
    """How the operator typed it, to name it in a refusal; None when the command worked it out
    (`start`, a time, a message id), which the mark then raises instead (see _not_retired)."""


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
    return SeekTarget(record, resolve_start(conn, to, option="--to"), _typed("--to", to))


def seek_at(conn: psycopg.Connection[Any], target: SeekTarget) -> tuple[Position, int]:
    """Store the seek to `target` (refused past the retired-up-to mark, as _not_retired says);
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
    return _past_mark(history_floor(conn, publication), publication, target.at, target.typed)


def _typed(option: str, value: str) -> str | None:
    """How to name a position the operator typed in a refusal; None for `start`, which means
    the oldest message still there (see _not_retired)."""
    return None if value == "start" else f"{option} {quoted(value)}"


def _not_retired(
    conn: psycopg.Connection[Any], publication: str, at: Position, typed: str | None
) -> Position:
    """`at`, unless retention retired messages of `publication` after it (the mark is past
    it): then a position the operator typed (`typed` names it) is refused, and one the
    command worked out (`start`, a time, a message id) becomes the mark, with a warning.

    The messages table stays locked against a retirement's drop until the caller's
    transaction ends, so the position it stores is seen by that retirement's last check.
    """
    lock_against_retirement(conn)
    # With an archive, the history begins where the archive does: the daemon reads the
    # archive below the retired-up-to mark (poller/store/archived_reads.py).
    mark = history_floor(conn, publication)
    checked = _past_mark(mark, publication, at, typed)
    if checked != at:
        log.warning(
            "messages of %s up to %s were retired by retention; starting after them",
            quoted(publication),
            mark,
        )
    return checked


def _past_mark(
    mark: Position | None, publication: str, at: Position, typed: str | None
) -> Position:
    if mark is None or at >= mark:
        return at
    if typed is not None:
        raise SubscriptionError(
            f"{typed}: messages of {quoted(publication)} up to {mark} were retired by"
            f" retention, so delivery after {at} would silently skip some; give {mark} or"
            " later (or start) to accept that they are gone"
        )
    return mark


def parse_time(value: str, option: str = "--to-time") -> datetime.datetime:
    """ISO 8601 with a UTC offset (`Z` or `+02:00`): a time without one is refused rather
    than guessed in some zone."""
    try:
        parsed = datetime.datetime.fromisoformat(value)
    except ValueError:
        raise RefusedValueError(
            f"{option} {quoted(value)} is not an ISO 8601 time (like 2024-05-01T10:00:00Z)"
        ) from None
    if parsed.tzinfo is None:
        raise RefusedValueError(
            f"{option} {quoted(value)} has no UTC offset (add Z or one like +02:00)"
        )
    return parsed


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
    inside the caller's), so the lock `_not_retired` takes holds until the seek is stored; on
    an autocommit connection LOCK TABLE would be refused outside a transaction."""
    with conn.transaction():
        return _seek_at(conn, name, _not_retired(conn, publication, at, typed))


def _seek_at(conn: psycopg.Connection[Any], name: str, at: Position) -> tuple[Position, int]:
    """Every shard moves with the subscription's row, under its lock (see `locked`)."""
    refuse_while_draining(locked(conn, name), f"cannot seek {quoted(name)}")
    store = AdminStore(conn)
    epoch = store.seek(name, at)
    assert epoch is not None  # the row is locked: it cannot have gone
    store.seek_shards(name, at)
    return at, epoch


class SkipRequested(NamedTuple):
    requested: Position
    pending: Position
    """The skip the leader will apply: `requested`, or a further one already pending."""
    leader_alive: bool


def request_skip(conn: psycopg.Connection[Any], name: str, to: str) -> SkipRequested:
    """Ask the leader to finish every message up to `to` without delivering it (again).

    Unlike a seek the epoch stays: nothing after `to` is delivered twice, and the delivery of
    a skipped message already in flight keeps its key until it ends (Pulsar #25627). Without
    a leader the request waits for the next one, which applies it before its first read.
    """
    record = get(conn, name)
    if record.kind is not None:
        raise SubscriptionError(
            f"subscription {quoted(name)} records a {record.kind} query's progress;"
            " only subscriptions `outbox poll` delivers can skip"
        )
    at = resolve_start(conn, to, option="--to")
    store = AdminStore(conn)
    if store.request_skip(name, at) is None:
        pending = store.skip_request(name)
        checkpoint = get(conn, name).checkpoint
        if pending is None or not at > checkpoint:
            raise SubscriptionError(
                f"--to {quoted(to)}: {quoted(name)} is already past it (checkpoint"
                f" {readable(checkpoint)}); nothing to skip"
            )
        return SkipRequested(at, pending.to, store.leader_alive(name))
    return SkipRequested(at, at, store.leader_alive(name))


def skip_request(conn: psycopg.Connection[Any], name: str) -> SkipRequest | None:
    """The skip a leader has not finished yet, if any."""
    return AdminStore(conn).skip_request(_checked_lookup(name))


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


def parse_place(text: str) -> Position | int:
    """A message's place as an operator types it: POS alone (what `outbox.append` returns;
    positions are unique), or TX:POS (what status, seek and `parked list` print)."""
    try:
        if ":" in text:
            return Position.parse(text)
        if text.isascii() and text.isdigit() and 0 < int(text) <= MAX_PART:
            return int(text)
    except ValueError:
        pass
    raise RefusedValueError(
        f"position {quoted(text)} is not POS or TX:POS (each at most {MAX_PART})"
    )


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


def find_message(
    conn: psycopg.Connection[Any],
    publication: str,
    *,
    message_id: str | None = None,
    at: Position | int | None = None,
) -> Message:
    """One message by its id or by its place: TX:POS, or POS alone (exactly one of the two)."""
    store = AdminStore(conn)
    if "\x00" in publication + (message_id or ""):
        row = None
    elif message_id is not None:
        row = store.message_by_id(publication, message_id)
    elif isinstance(at, int):
        row = store.message_by_position(publication, at)
    else:
        assert at is not None
        row = store.message_at(publication, at)
    if row is not None:
        return message_from_row(row)
    # Retention may have dropped it: an archived publication's archive has it then.
    archived = None
    if "\x00" not in publication + (message_id or ""):
        archived = find_archived(
            conn,
            publication,
            message_id=message_id,
            position=at if isinstance(at, int) else None,
            at=at if isinstance(at, Position) else None,
        )
    if archived is None:
        wanted = f"id {quoted(message_id)}" if message_id is not None else f"at {at}"
        raise NotFoundError(f"publication {quoted(publication)} has no message {wanted}")
    return archived


def delete_publication_messages(conn: psycopg.Connection[Any], publication: str) -> int:
    return AdminStore(conn).delete_publication_messages(publication)
