"""Which `outbox poll` process leads which shard of a subscription: pure logic, no I/O."""

from poller.membership.assignment import (
    ONLY_SHARD,
    PLAIN_LAYOUT,
    Layout,
    Member,
    ShardUnit,
    assign,
)

__all__ = ["ONLY_SHARD", "PLAIN_LAYOUT", "Layout", "Member", "ShardUnit", "assign"]
