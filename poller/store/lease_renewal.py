"""A process's renewal of everything it holds of one subscription: every lease of its shards
and its membership, in one statement (`renew_process_leases`), run by the process's renewer
(poller/daemon/process/lease_renewer.py) on a connection of its own."""

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import psycopg

from outbox.queries import QUERIES
from poller.membership import Member, ShardUnit
from poller.store.membership_store import GroupState
from poller.store.records import LeaseState


@dataclass(frozen=True)
class HeldLease:
    """A lease the process holds, as its term took it, and the runtime figures to record
    with its renewal (None: the stored ones stay)."""

    unit: ShardUnit
    token: int
    runtime: dict[str, Any] | None = None


@dataclass(frozen=True)
class ProcessRenewal:
    """What one renewal found: per lease named, the subscription as stored now when the lease
    is still the process's (None when another holder took it, or it is gone); the group."""

    leases: dict[tuple[ShardUnit, int], LeaseState | None]
    group: GroupState


async def renew_process_leases(
    conn: psycopg.AsyncConnection[Any],
    subscription: str,
    holder: str,
    host: str,
    pid: int,
    ttl_seconds: float,
    leases: Sequence[HeldLease],
    *,
    member: bool,
) -> ProcessRenewal | None:
    """Extend `leases` (those still held) and, while `member`, the membership; None when the
    subscription is gone."""
    cursor = await conn.execute(
        QUERIES["renew_process_leases"],
        {
            "subscription": subscription,
            "holder": holder,
            "host": host,
            "pid": pid,
            "ttl_seconds": ttl_seconds,
            "member": member,
            "shard_counts": [lease.unit.shard_count for lease in leases],
            "shards": [lease.unit.shard for lease in leases],
            "tokens": [lease.token for lease in leases],
            "runtimes": [
                None if lease.runtime is None else json.dumps(lease.runtime) for lease in leases
            ],
        },
    )
    rows = await cursor.fetchall()
    if not rows:
        return None
    found: dict[tuple[ShardUnit, int], LeaseState | None] = {}
    for row in rows:
        shard_count, shard, token, renewed = row[:4]
        if shard_count is not None:
            state = LeaseState.from_row(row[4:16])
            found[ShardUnit(shard_count, shard), token] = state if renewed else None
    others, expiries, mine, now = rows[0][16:]
    members = [Member(m, e) for m, e in zip(others, expiries, strict=True)]
    # This statement's own upsert is not in its snapshot: this member comes from RETURNING.
    members.append(Member(holder, mine))
    layout = LeaseState.from_row(rows[0][4:16]).layout
    return ProcessRenewal(found, GroupState(layout, members, now))
