"""A process's membership of a subscription's group, which the coordinator
(poller/daemon/process/coordinator.py) deals the shards by: renewed with the process's leases
(lease_renewal.py), left at stop."""

from dataclasses import dataclass
from typing import Any

import psycopg

from poller.membership import Layout, Member
from poller.store.shard_reads import SHARD_QUERIES


@dataclass(frozen=True)
class GroupState:
    """What a membership renewal returns: the layout, the members, and the database's clock."""

    layout: Layout
    members: list[Member]
    now: float


async def leave_membership(
    conn: psycopg.AsyncConnection[Any], subscription: str, member: str
) -> None:
    await conn.execute(
        SHARD_QUERIES["leave_membership"], {"subscription": subscription, "member": member}
    )
