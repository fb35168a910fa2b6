"""What an operator's action would change, said before it is taken: a front end shows it on a
confirmation (the console's pages) and then takes exactly the action previewed, and only
while it would still change that (poller.operations.confirmed).

Counts are of messages after the stored checkpoints; messages a leader finished after its last
stored checkpoint are delivered again after any seek (delivery is at least once), and are not
counted, and a leader delivers some of what a skip covers before it applies the skip.
"""

import datetime
from typing import Any, NamedTuple

import psycopg

from outbox.positions import Position, readable
from poller.operations.places import resolve_start
from poller.operations.refusals import SubscriptionError, quoted
from poller.operations.seeks import seek_preview_place, seek_target
from poller.operations.skips import skip_request
from poller.operations.subscriptions import get, refuse_while_draining
from poller.store.operator_store import OperatorStore


class SeekPreview(NamedTuple):
    subscription: str
    to: Position
    """Where delivery resumes after (what the seek stores, for every shard)."""
    delivered_again: int
    """Messages after `to` that a shard's checkpoint had passed: delivered again."""
    passed_over: int
    """Messages after a shard's checkpoint up to `to`: never delivered."""
    voids_skip: bool
    """A skip the leader has not finished yet ends with the seek (its epoch is over)."""
    epoch: int
    """The epoch the seek ends."""


class SkipPreview(NamedTuple):
    subscription: str
    to: Position
    finished_undelivered: int
    """Messages after a shard's stored checkpoint up to `to`: at most this many are finished
    without delivery (the leader delivers some before it applies the skip)."""
    epoch: int
    """The epoch the skip is asked for in (a seek meanwhile voids it)."""


class ParkedPreview(NamedTuple):
    subscription: str
    target: Position | None
    """The one parked message acted on; None: every one."""
    messages: int
    up_to: Position | None
    """The last of them in delivery order (None: there is none)."""
    digest: str
    """Of their positions: the action acts only while the same messages give it."""


def preview_seek(
    conn: psycopg.Connection[Any],
    name: str,
    *,
    to: str | None = None,
    since: datetime.datetime | None = None,
    message_id: str | None = None,
) -> SeekPreview:
    """What `outbox seek` would do now, refused as the seek would be (a typed place before
    the retired-up-to mark, a change of the shard count draining)."""
    target = seek_target(conn, name, to=to, since=since, message_id=message_id)
    refuse_while_draining(target.record, f"cannot seek {quoted(name)}")
    at = seek_preview_place(conn, target)
    again = passed = 0
    store = OperatorStore(conn)
    for shard in store.shard_checkpoints(target.record.subscription_id):
        if at < shard.checkpoint:
            again += store.messages_between(shard.publication, at, shard.checkpoint, shard.unit)
        elif shard.checkpoint < at:
            passed += store.messages_between(shard.publication, shard.checkpoint, at, shard.unit)
    skip = skip_request(conn, name)
    epoch = target.record.epoch
    return SeekPreview(name, at, again, passed, skip is not None and skip.epoch == epoch, epoch)


def preview_skip(conn: psycopg.Connection[Any], name: str, to: str) -> SkipPreview:
    """What `outbox skip` would finish without delivering, refused as the skip would be."""
    record = get(conn, name)
    at = resolve_start(conn, to, option="--to")
    store = OperatorStore(conn)
    shards = store.shard_checkpoints(record.subscription_id)
    if not any(shard.checkpoint < at for shard in shards):
        raise SubscriptionError(
            f"--to {quoted(to)}: {quoted(name)} is already past it (checkpoint"
            f" {readable(record.checkpoint)}); nothing to skip"
        )
    finished = sum(
        store.messages_between(shard.publication, shard.checkpoint, at, shard.unit)
        for shard in shards
        if shard.checkpoint < at
    )
    return SkipPreview(name, at, finished, record.epoch)


def preview_parked(
    conn: psycopg.Connection[Any], name: str, target: Position | None
) -> ParkedPreview:
    """Which parked messages a replay or a purge of `target` (None: every one) acts on."""
    get(conn, name)
    position = None if target is None else target.position
    found = OperatorStore(conn).parked_set(name, position)
    return ParkedPreview(name, target, found.messages, found.last, found.digest)


def parked_count(conn: psycopg.Connection[Any], name: str) -> int:
    """How many parked messages `name` has."""
    get(conn, name)
    return OperatorStore(conn).count_parked(name)
