"""What operators do to subscriptions (the CLI's verbs), one short transaction each.

The rules live here (names, settings and positions are checked before anything is stored);
the SQL lives in the store.
"""

import datetime
from typing import Any, NamedTuple

import psycopg

from outbox.messages import check_name
from outbox.positions import MAX_PART, START, Position, at_frontier
from poller.message import Message
from poller.store.admin_store import AdminStore
from poller.store.message_reads import message_from_row, safe_frontier
from poller.store.records import Blocker, SubscriptionRecord, settings_from_stored

# The largest bigint: a checkpoint at (frontier - 1, MAX_POSITION) is past every row of every
# transaction below the frontier, and before every row of transactions still running.
MAX_POSITION = MAX_PART

# Values quoted in errors are cut to this many characters: a 10 MB name must not become a
# 10 MB error line.
_QUOTED_LIMIT = 80


class SubscriptionError(ValueError):
    """An operator asked for something that cannot be done; the message says why."""


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
        raise SubscriptionError(
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


def create(
    conn: psycopg.Connection[Any],
    name: str,
    publication: str,
    start: str,
    settings: dict[str, Any],
) -> Position:
    check_name("subscription", name)
    check_name("publication", publication)
    settings_from_stored(settings)  # refuse bad settings before storing them
    at = resolve_start(conn, start)
    if not AdminStore(conn).insert_subscription(name, publication, at, settings):
        raise SubscriptionError(f"subscription {quoted(name)} already exists")
    return at


def _missing(name: str) -> SubscriptionError:
    return SubscriptionError(f"subscription {quoted(name)} does not exist")


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


def delete(conn: psycopg.Connection[Any], name: str) -> None:
    if not AdminStore(conn).delete_subscription(_checked_lookup(name)):
        raise _missing(name)


def update_settings(conn: psycopg.Connection[Any], name: str, changes: dict[str, Any]) -> None:
    merged = {**get(conn, name).stored_settings, **changes}
    settings_from_stored(merged)
    AdminStore(conn).replace_settings(name, merged)


def seek(conn: psycopg.Connection[Any], name: str, to: str) -> tuple[Position, int]:
    at = resolve_start(conn, to, option="--to")
    epoch = AdminStore(conn).seek(_checked_lookup(name), at)
    if epoch is None:
        raise _missing(name)
    return at, epoch


def request_replay(conn: psycopg.Connection[Any], name: str) -> None:
    """A running leader re-delivers the parked messages; the request is for that leader, so
    without one it would wait unseen (a new leader starts from the stored request count)."""
    get(conn, name)
    store = AdminStore(conn)
    if not store.leader_alive(name):
        raise SubscriptionError(
            f"no daemon leads {quoted(name)}: start `outbox poll --subscription NAME` first"
        )
    store.request_replay(name)


def list_parked(conn: psycopg.Connection[Any], name: str, limit: int) -> list[tuple[Any, ...]]:
    get(conn, name)
    return AdminStore(conn).parked(name, limit)


def purge_parked(conn: psycopg.Connection[Any], name: str) -> int:
    get(conn, name)
    return AdminStore(conn).purge_parked(name)


def find_message(
    conn: psycopg.Connection[Any],
    publication: str,
    *,
    message_id: str | None = None,
    at: Position | None = None,
) -> Message:
    """One message by its id or by its place in delivery order (exactly one of the two)."""
    store = AdminStore(conn)
    if "\x00" in publication + (message_id or ""):
        row = None
    elif message_id is not None:
        row = store.message_by_id(publication, message_id)
    else:
        assert at is not None
        row = store.message_at(publication, at)
    if row is None:
        wanted = f"id {quoted(message_id)}" if message_id is not None else f"at {at}"
        raise SubscriptionError(f"publication {quoted(publication)} has no message {wanted}")
    return message_from_row(row)


def delete_publication_messages(conn: psycopg.Connection[Any], publication: str) -> int:
    return AdminStore(conn).delete_publication_messages(publication)


class SubscriptionStatus(NamedTuple):
    subscription: str
    publication: str
    checkpoint: Position
    messages_behind: int
    oldest_undelivered_age: float | None
    leader_host: str | None
    leader_pid: int | None
    leader_since: datetime.datetime | None
    leader_alive: bool
    # Committed messages the frontier still hides, and who holds it back (empty when the
    # holders are not visible to this user).
    hidden: bool
    blockers: list[Blocker]


def status(conn: psycopg.Connection[Any]) -> list[SubscriptionStatus]:
    store = AdminStore(conn)
    result = []
    for row in store.status():
        name, publication, tx, pos, behind, age, host, pid, since, alive, hidden_tx = row
        blockers = [] if hidden_tx is None else store.blockers_before(hidden_tx)
        result.append(
            SubscriptionStatus(
                name,
                publication,
                Position(tx, pos),
                behind,
                age,
                host,
                pid,
                since,
                alive,
                hidden_tx is not None,
                [Blocker(*blocker) for blocker in blockers],
            )
        )
    return result
