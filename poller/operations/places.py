"""Places in a publication's delivery order as an operator types them: `start`, `end`, TX:POS,
POS alone, or a time."""

import datetime
from typing import Any

import psycopg

from outbox.positions import MAX_PART, START, Position, at_frontier
from poller.operations.refusals import RefusedValueError, SubscriptionError, quoted
from poller.store.admin_store import AdminStore
from poller.store.message_reads import safe_frontier

# The largest bigint: a checkpoint at (frontier - 1, MAX_POSITION) is past every row of every
# transaction below the frontier, and before every row of transactions still running.
MAX_POSITION = MAX_PART


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
