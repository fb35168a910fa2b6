"""The figures a front end samples beside `status`: each shard's checkpoint, what the live
leaders last wrote of their state, and how many messages lie between two places (what a
checkpoint passed between two samples: the delivery rate)."""

from typing import Any

import psycopg

from outbox.positions import Position
from poller.membership import ShardUnit
from poller.store.operator_store import OperatorStore, Runtime, ShardCheckpoint


def shard_checkpoints(
    conn: psycopg.Connection[Any], subscription: str | None = None
) -> list[ShardCheckpoint]:
    """Each shard's checkpoint of every subscription, or of `subscription` alone."""
    return OperatorStore(conn).shard_checkpoints(subscription)


def runtime(conn: psycopg.Connection[Any], subscription: str) -> Runtime | None:
    """Consumers, in flight, retrying and buffered, as the live leaders last wrote them;
    None when there is no such subscription."""
    return OperatorStore(conn).runtime(subscription)


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
