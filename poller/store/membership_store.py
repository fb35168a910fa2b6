"""A process's membership of a subscription's group: the statements behind the coordinator
(poller/daemon/process/coordinator.py)."""

from dataclasses import dataclass
from typing import Any

import psycopg

from poller.membership import Layout, Member
from poller.store.records import layout_from_columns
from poller.store.shard_reads import SHARD_QUERIES


@dataclass(frozen=True)
class GroupState:
    """What a membership renewal returns: the layout, the members, and the database's clock."""

    layout: Layout
    members: list[Member]
    now: float


async def renew_membership(
    conn: psycopg.AsyncConnection[Any],
    subscription: str,
    member: str,
    host: str,
    pid: int,
    ttl_seconds: float,
) -> GroupState | None:
    """None when the subscription is gone."""
    cursor = await conn.execute(
        SHARD_QUERIES["renew_membership"],
        {
            "subscription": subscription,
            "member": member,
            "host": host,
            "pid": pid,
            "ttl_seconds": ttl_seconds,
        },
    )
    row = await cursor.fetchone()
    if row is None:
        return None
    count, draining, barrier_transaction, barrier_position, others, expiries, mine, now = row
    members = [Member(m, e) for m, e in zip(others, expiries, strict=True)]
    # This statement's own upsert is not in its snapshot: this member comes from RETURNING.
    members.append(Member(member, mine))
    layout = layout_from_columns(count, draining, barrier_transaction, barrier_position)
    return GroupState(layout, members, now)


async def leave_membership(
    conn: psycopg.AsyncConnection[Any], subscription: str, member: str
) -> None:
    await conn.execute(
        SHARD_QUERIES["leave_membership"], {"subscription": subscription, "member": member}
    )
