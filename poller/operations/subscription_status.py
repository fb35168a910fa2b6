"""What operators read of where subscriptions stand: `outbox status`, and the shards
`subscription show` lists (outbox.subscription_status, outbox.subscription_shard_status)."""

import datetime
from typing import Any, NamedTuple

import psycopg

from outbox.positions import Position
from outbox.read_servers import ReplicaLag
from poller.blockers import Blocker
from poller.operations.shard_views import ShardLeader, ShardLeadership, ShardStatus
from poller.operations.subscriptions import get
from poller.store import read_server_check
from poller.store.admin_store import AdminStore
from poller.store.shard_store import shard_leaders, shard_statuses


class SubscriptionStatus(NamedTuple):
    subscription: str
    publication: str
    checkpoint: Position
    messages_behind: int
    oldest_undelivered_age: float | None
    leader_host: str | None
    leader_pid: int | None
    leader_since: datetime.datetime | None
    leader_alive: bool
    # Committed messages the frontier still hides, and who holds it back (empty when the
    # holders are not visible to this user).
    hidden: bool
    blockers: list[Blocker]
    destination_unavailable: str | None
    """Why the leader's handler cannot deliver now (a relay's broker is down), if it cannot."""
    shards: ShardLeadership
    """Its shard count (and the draining one) and how many of each a process leads."""
    shard_leaders: list[ShardLeader]
    """Each shard and its leader (a plain subscription: its one shard), draining ones first."""
    retrying: int
    """Messages backing off before their next attempt, as the live leaders last wrote."""
    parked: int
    oldest_parked: Position | None
    """The message parked longest ago (None when none is)."""
    oldest_parked_age: float | None
    kind: str | None
    """None for a subscription `outbox poll` delivers; "spark" for a Spark query's progress."""
    last_batch_at: datetime.datetime | None
    """A Spark query's row: when it last recorded a batch (or started)."""


def status(conn: psycopg.Connection[Any], *, show_query: bool = False) -> list[SubscriptionStatus]:
    """`show_query`: each blocker's SQL (its start, password literals redacted), which an
    operator asks for (`outbox status --show-query`); otherwise its query is None."""
    store = AdminStore(conn)
    rows = store.status()
    leaders = shard_leaders(conn)  # after: every subscription of `rows` but a deleted one
    result = []
    for row in rows:
        (name, publication, tx, pos, behind, age, host, pid, since, alive, hidden_tx, problem,
         retrying, parked, parked_tx, parked_pos, parked_age, kind, updated_at) = row  # fmt: skip
        blockers = (
            [] if hidden_tx is None else store.blockers_before(hidden_tx, with_query=show_query)
        )
        shards = [ShardLeader.of(shard) for shard in leaders.get(name, [])]
        result.append(
            SubscriptionStatus(
                name,
                publication,
                Position(tx, pos),
                behind,
                age,
                host,
                pid,
                since,
                alive,
                hidden_tx is not None,
                [Blocker(*blocker) for blocker in blockers],
                problem,
                ShardLeadership.of(shards),
                shards,
                retrying,
                parked,
                None if parked_tx is None else Position(parked_tx, parked_pos),
                parked_age,
                kind,
                updated_at if kind is not None else None,
            )
        )
    return result


class ReadServerStatus(NamedTuple):
    """A hot standby that messages are read from, against the primary."""

    refused: str | None
    """Why the daemons refuse to read from it (it is no standby of the primary), or None."""
    lag: ReplicaLag
    waiting: frozenset[str]
    """The subscriptions whose stored checkpoint it has not replayed: their reads there find
    nothing, and wait for it."""

    @classmethod
    def of(cls, checked: read_server_check.ReadServerStatus) -> "ReadServerStatus":
        return cls(checked.refused, checked.lag, checked.waiting)


def read_server(
    conn: psycopg.Connection[Any],
    read_conn: psycopg.Connection[Any],
    rows: list[SubscriptionStatus],
) -> ReadServerStatus:
    """`read_conn`'s server (a hot standby messages are read from) against `conn`'s, for the
    subscriptions of `status(conn)`."""
    checkpoints = {row.subscription: row.checkpoint for row in rows}
    return ReadServerStatus.of(read_server_check.read_server_status(conn, read_conn, checkpoints))


def shards(conn: psycopg.Connection[Any], name: str) -> list[ShardStatus]:
    """One line per shard of the subscription (one, shard 0 of 1, for a plain one), the
    draining shards of a change of the count first."""
    return [ShardStatus.of(row) for row in shard_statuses(conn, [get(conn, name).subscription_id])]
