"""The figures a front end samples beside `status`: each shard's checkpoint, what the live
leaders last wrote of their state, and how many messages lie between two places (what a
checkpoint passed between two samples: the delivery rate)."""

from typing import Any, NamedTuple

import psycopg

from outbox.positions import Position
from poller.membership import ShardUnit
from poller.store import operator_store
from poller.store.operator_store import OperatorStore


class ShardCheckpoint(NamedTuple):
    subscription: str
    publication: str
    unit: ShardUnit
    checkpoint: Position

    @classmethod
    def of(cls, row: operator_store.ShardCheckpoint) -> "ShardCheckpoint":
        return cls(row.subscription, row.publication, row.unit, row.checkpoint)


class Runtime(NamedTuple):
    """What a subscription's live leaders last wrote, summed over its shards."""

    consumers: int
    in_flight: int
    retrying: int
    buffered: int

    @classmethod
    def of(cls, row: operator_store.Runtime) -> "Runtime":
        return cls(row.consumers, row.in_flight, row.retrying, row.buffered)


def shard_checkpoints(
    conn: psycopg.Connection[Any], subscription: str | None = None
) -> list[ShardCheckpoint]:
    """Each shard's checkpoint of every subscription, or of `subscription` alone."""
    return [ShardCheckpoint.of(row) for row in OperatorStore(conn).shard_checkpoints(subscription)]


def runtime(conn: psycopg.Connection[Any], subscription: str) -> Runtime | None:
    """Consumers, in flight, retrying and buffered, as the live leaders last wrote them;
    None when there is no such subscription."""
    found = OperatorStore(conn).runtime(subscription)
    return None if found is None else Runtime.of(found)


def messages_between(
    conn: psycopg.Connection[Any],
    publication: str,
    after: Position,
    up_to: Position,
    unit: ShardUnit,
) -> int:
    """Messages of `publication` (of the shard `unit` alone) after `after`, up to `up_to`."""
    if not after < up_to:
        return 0
    return OperatorStore(conn).messages_between(publication, after, up_to, unit)
