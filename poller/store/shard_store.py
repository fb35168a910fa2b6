"""What operators and the metrics read of a subscription's shards (sync psycopg), and the
statements of the operator's shard commands (sql/shard_admin_queries.sql; AdminStore runs the
writes)."""

import datetime
from typing import Any, NamedTuple

import psycopg

from outbox.positions import Position
from outbox.queries import load_queries
from poller.membership import ShardUnit

SHARD_ADMIN_QUERIES = load_queries("shard_admin_queries.sql")


class ShardStatus(NamedTuple):
    """One row of outbox.subscription_shard_status."""

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


def shard_statuses(conn: psycopg.Connection[Any], subscriptions: list[str]) -> list[ShardStatus]:
    """The shards of `subscriptions`, by subscription, each one's draining shards first."""
    rows = conn.execute(
        SHARD_ADMIN_QUERIES["shard_status"], {"subscriptions": subscriptions}
    ).fetchall()
    return [
        ShardStatus(name, ShardUnit(count, shard), draining, Position(tx, pos), *rest)
        for name, count, shard, draining, tx, pos, *rest in rows
    ]


class ShardLeader(NamedTuple):
    """Who leads one shard: the last process that held its lease, and whether it still does."""

    unit: ShardUnit
    draining: bool
    leader_alive: bool
    leader_host: str | None
    leader_pid: int | None
    leader_since: datetime.datetime | None


def shard_leaders(conn: psycopg.Connection[Any]) -> dict[str, list[ShardLeader]]:
    """Every subscription's shards with their leaders, its draining shards first."""
    leaders: dict[str, list[ShardLeader]] = {}
    for name, count, shard, draining, *leader in conn.execute(SHARD_ADMIN_QUERIES["shard_leaders"]):
        leaders.setdefault(name, []).append(ShardLeader(ShardUnit(count, shard), draining, *leader))
    return leaders
