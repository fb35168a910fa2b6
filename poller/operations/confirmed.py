"""Operators' actions taken only as their confirmation showed them.

A front end that shows what an action will change (poller.operations.previews) and asks again
must not then change something else: messages parked after the page was drawn, a checkpoint
that moved on so that a seek now delivers more again. Each action here takes the preview the
operator confirmed, works it out again in its own transaction with the rows that decide it
locked, and acts only while nothing it showed has changed. Otherwise it changes nothing and
raises ChangedSinceShownError with the preview as things now stand, to be shown and confirmed
again.
"""

from typing import Any, NamedTuple

import psycopg

from outbox.positions import Position
from poller.operations.parked import ReplayRequested, replay_marked
from poller.operations.previews import (
    ParkedPreview,
    SeekPreview,
    SkipPreview,
    preview_parked,
    preview_seek,
    preview_skip,
)
from poller.operations.refusals import SubscriptionError
from poller.operations.seeks import seek
from poller.operations.skips import SkipRequested, request_skip
from poller.operations.subscriptions import get, locked
from poller.store.operator_store import OperatorStore, ParkedSet
from poller.store.retired_positions import lock_against_retirement

Preview = SeekPreview | SkipPreview | ParkedPreview


class ChangedSinceShownError(SubscriptionError):
    """What the action would change is no longer what its confirmation showed; nothing was
    changed. `now` is what it would change now."""

    def __init__(self, now: Preview) -> None:
        super().__init__(
            "what this action would change has changed since its confirmation was shown;"
            " nothing was changed"
        )
        self.now = now


def seek_as_shown(conn: psycopg.Connection[Any], shown: SeekPreview) -> tuple[Position, int]:
    """The seek `shown` previewed, if it would still deliver again and pass over exactly
    what it said, in the same epoch; the place stored and the new epoch."""
    name = shown.subscription
    with conn.transaction():
        # Every seek takes these two locks in this order (seeks._seek_not_retired).
        # The row's lock holds the checkpoints still until the seek is stored: a plain
        # subscription's checkpoint is an UPDATE of the row, a shard's takes it FOR SHARE.
        lock_against_retirement(conn)
        locked(conn, name)
        now = preview_seek(conn, name, to=str(shown.to))
        if now != shown:
            raise ChangedSinceShownError(now)
        return seek(conn, name, str(shown.to))


class SkipTaken(NamedTuple):
    requested: SkipRequested
    finished_undelivered: int
    """Messages after the stored checkpoints up to the skip's place when it was asked for: at
    most this many are finished without delivery."""


def skip_as_shown(conn: psycopg.Connection[Any], shown: SkipPreview) -> SkipTaken:
    """The skip `shown` previewed, counted again when it is asked for. A skip finishes fewer
    messages as the leader delivers, which changes nothing the operator accepted; it is
    refused when it would finish more than shown, or a seek started another epoch."""
    name = shown.subscription
    with conn.transaction():
        locked(conn, name)  # the checkpoints hold still while it is counted
        now = preview_skip(conn, name, str(shown.to))
        if now.epoch != shown.epoch or now.finished_undelivered > shown.finished_undelivered:
            raise ChangedSinceShownError(now)
        requested = request_skip(conn, name, str(shown.to))
    return SkipTaken(requested, now.finished_undelivered)


def replay_as_shown(conn: psycopg.Connection[Any], shown: ParkedPreview) -> ReplayRequested:
    """A replay of exactly the parked messages `shown` counted."""
    name, position, parked = _parked_shown(shown)
    store = OperatorStore(conn)
    requested = replay_marked(
        conn, name, lambda: store.mark_parked_as_shown_for_replay(name, position, parked)
    )
    if not requested.marked:
        raise ChangedSinceShownError(preview_parked(conn, name, shown.target))
    return requested


def purge_as_shown(conn: psycopg.Connection[Any], shown: ParkedPreview) -> list[int]:
    """A purge of exactly the parked messages `shown` counted; their positions."""
    name, position, parked = _parked_shown(shown)
    get(conn, name)
    purged = OperatorStore(conn).purge_parked_as_shown(name, position, parked)
    if not purged:
        raise ChangedSinceShownError(preview_parked(conn, name, shown.target))
    return purged


def _parked_shown(shown: ParkedPreview) -> tuple[str, int | None, ParkedSet]:
    position = None if shown.target is None else shown.target.position
    return shown.subscription, position, ParkedSet(shown.messages, shown.digest, shown.up_to)
