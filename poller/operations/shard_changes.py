"""`outbox subscription update NAME --shards M`: a change of a subscription's shard count.

Messages of one key must stay in order across the change, yet the old shards and the new
split keys differently. So the change is made at a barrier B, a place in delivery order: the
old shards (the draining count) deliver every message up to B, and the new shards start after
B only once all of those are finished, which the daemon sees and then ends the change (see
docs/explanation/shards.md). B is the end of the last transaction older than the change's
own, so nothing a term of the old layout reads before it sees the change (its snapshot counts
the change's transaction as running) lands after it, and at least every shard's checkpoint,
so no new shard starts behind what an old one finished.
"""

from typing import Any, NamedTuple

import psycopg

from outbox.positions import Position
from poller.operations.refusals import SubscriptionError, quoted
from poller.operations.subscriptions import check_shard_count, locked, refuse_while_draining
from poller.store.admin_store import AdminStore


class ShardChange(NamedTuple):
    previous: int
    """The shard count before the change, which now drains."""
    shard_count: int
    barrier: Position | None
    """Where the old shards stop and the new ones start; None when the count was already
    `shard_count`, and nothing changed."""


def change_shard_count(conn: psycopg.Connection[Any], name: str, shard_count: int) -> ShardChange:
    """Start the change of `name`'s shard count to `shard_count` (its own transaction, or a
    savepoint of the caller's)."""
    check_shard_count(shard_count)
    store = AdminStore(conn)
    with conn.transaction():
        record = locked(conn, name)
        if record.kind is not None:
            raise SubscriptionError(
                f"subscription {quoted(name)} records a {record.kind} query's progress; only"
                " subscriptions `outbox poll` delivers have shards"
            )
        layout = record.layout
        if shard_count == layout.shard_count:
            return ShardChange(layout.shard_count, shard_count, None)
        refuse_while_draining(record, f"cannot change the shards of {quoted(name)}")
        barrier = store.shard_barrier(name, record.publication)
        if layout.plain:
            # Its one shard kept its checkpoint in the subscription's row; as the old layout
            # it needs a row of its own, which the daemon moves and drains.
            store.insert_shards(name, 1, record.checkpoint)
        store.insert_shards(name, shard_count, barrier)
        store.begin_shard_change(name, shard_count, barrier)
    return ShardChange(layout.shard_count, shard_count, barrier)
