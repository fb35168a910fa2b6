"""Where a subscription may start or seek to, given the retired-up-to mark: the messages
retention dropped are gone, so a place before the mark is refused or moved up to it."""

import logging
from typing import Any

import psycopg

from outbox.positions import Position
from poller.operations.refusals import SubscriptionError, quoted
from poller.store.archived_reads import history_floor
from poller.store.retired_positions import lock_against_retirement

log = logging.getLogger(__name__)


def as_typed(option: str, value: str) -> str | None:
    """How to name a position the operator typed in a refusal; None for `start`, which means
    the oldest message still there (see not_retired)."""
    return None if value == "start" else f"{option} {quoted(value)}"


def not_retired(
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
    checked = past_mark(mark, publication, at, typed)
    if checked != at:
        log.warning(
            "messages of %s up to %s were retired by retention; starting after them",
            quoted(publication),
            mark,
        )
    return checked


def past_mark(mark: Position | None, publication: str, at: Position, typed: str | None) -> Position:
    if mark is None or at >= mark:
        return at
    if typed is not None:
        raise SubscriptionError(
            f"{typed}: messages of {quoted(publication)} up to {mark} were retired by"
            f" retention, so delivery after {at} would silently skip some; give {mark} or"
            " later (or start) to accept that they are gone"
        )
    return mark
