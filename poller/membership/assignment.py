"""The shards of a subscription and how the live processes share them.

Pure: the members and the time come in as arguments (the database's clock, read in the same
statement that renewed this process's membership), so it is tested without a database, as the
subscription machine is.
"""

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from outbox.positions import Position


class ShardUnit(NamedTuple):
    """One shard of one layout: shard `shard` of `shard_count`. A subscription of one shard has
    the single unit (1, 0)."""

    shard_count: int
    shard: int

    def __str__(self) -> str:
        return f"{self.shard}/{self.shard_count}"


@dataclass(frozen=True)
class Layout:
    """A subscription's shards: the current count, and during a change of it the old count,
    whose shards finish every message up to `barrier` before the new shards start after it."""

    shard_count: int
    draining_shard_count: int | None = None
    barrier: Position | None = None

    @property
    def plain(self) -> bool:
        """One shard and no change: stored in outbox.subscriptions alone, as before shards."""
        return self.shard_count == 1 and self.draining_shard_count is None

    def units(self) -> list[ShardUnit]:
        """The draining layout's shards first: they hold the new ones back."""
        counts = [self.shard_count]
        if self.draining_shard_count is not None:
            counts.insert(0, self.draining_shard_count)
        return [ShardUnit(count, shard) for count in counts for shard in range(count)]

    def has(self, unit: ShardUnit) -> bool:
        """Whether `unit` is one of this layout's shards (draining or current)."""
        return unit.shard_count in (self.shard_count, self.draining_shard_count) and (
            0 <= unit.shard < unit.shard_count
        )

    def draining(self, unit: ShardUnit) -> bool:
        return unit.shard_count == self.draining_shard_count

    def waits_for_barrier(self, unit: ShardUnit) -> bool:
        """A shard of the new count during a change: it may not start before the old ones end."""
        return self.draining_shard_count is not None and unit.shard_count == self.shard_count


# A subscription that was never sharded: one shard, no change.
PLAIN_LAYOUT = Layout(1)
# The lease of a plain subscription.
ONLY_SHARD = ShardUnit(1, 0)


class Member(NamedTuple):
    """A process sharing the subscription, and when its membership runs out (database time,
    seconds since the epoch)."""

    member: str
    expires_at: float


def assign(layout: Layout, members: Sequence[Member], now: float) -> dict[str, list[ShardUnit]]:
    """The units each live member leads.

    A subscription of one shard keeps today's behaviour: every live member competes for its
    lease, and the others stand by. Otherwise the units are dealt round-robin over the live
    members sorted by id: each gets the floor or the ceiling of units / members, and the
    result depends on nothing but the set of live members, so it does not move while that set
    does not change (no ping-pong), whatever order the members renewed in.
    """
    live = sorted({m.member for m in members if m.expires_at > now})
    units = layout.units()
    if layout.plain:
        return {member: list(units) for member in live}
    shares: dict[str, list[ShardUnit]] = {member: [] for member in live}
    for index, unit in enumerate(units):
        if live:
            shares[live[index % len(live)]].append(unit)
    return shares
