"""A subscription's shards as operators read them (`outbox status`, `subscription show`, the
console): made from the store's rows here, so front ends depend on the façade alone; the
store keeps its own for the daemon's metrics."""

import datetime
from typing import NamedTuple

from outbox.positions import Position
from poller.membership import ShardUnit
from poller.store import shard_store


class ShardStatus(NamedTuple):
    """One shard of a subscription: where it stands and who leads it."""

    subscription: str
    unit: ShardUnit
    draining: bool
    """A shard of the old count during a change of it: it delivers up to the barrier only."""
    checkpoint: Position
    messages_behind: int
    leader_host: str | None
    leader_pid: int | None
    leader_since: datetime.datetime | None
    leader_alive: bool

    @classmethod
    def of(cls, row: shard_store.ShardStatus) -> "ShardStatus":
        return cls(
            row.subscription,
            row.unit,
            row.draining,
            row.checkpoint,
            row.messages_behind,
            row.leader_host,
            row.leader_pid,
            row.leader_since,
            row.leader_alive,
        )


class ShardLeader(NamedTuple):
    """Who leads one shard: the last process that held its lease, and whether it still does."""

    unit: ShardUnit
    draining: bool
    leader_alive: bool
    leader_host: str | None
    leader_pid: int | None
    leader_since: datetime.datetime | None

    @classmethod
    def of(cls, row: shard_store.ShardLeader) -> "ShardLeader":
        return cls(
            row.unit,
            row.draining,
            row.leader_alive,
            row.leader_host,
            row.leader_pid,
            row.leader_since,
        )


class ShardLeadership(NamedTuple):
    """How many of a subscription's shards a live process leads."""

    shard_count: int
    draining_shard_count: int | None
    led: int
    draining_led: int

    @classmethod
    def of(cls, shards: list[ShardLeader]) -> "ShardLeadership":
        current = [shard for shard in shards if not shard.draining]
        draining = [shard for shard in shards if shard.draining]
        return cls(
            current[0].unit.shard_count if current else 1,
            draining[0].unit.shard_count if draining else None,
            sum(shard.leader_alive for shard in current),
            sum(shard.leader_alive for shard in draining),
        )
