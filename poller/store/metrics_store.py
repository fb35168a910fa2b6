"""The statements a metrics scrape runs (sync psycopg, on the HTTP server's thread)."""

from typing import Any, NamedTuple

import psycopg

from outbox.archive import catalog as archive_catalog
from outbox.positions import Position
from outbox.queries import QUERIES


class SubscriptionFigures(NamedTuple):
    """One subscription as outbox.subscription_status shows it (what is stored, so every
    process of the subscription, leader or standby, reports the same)."""

    subscription: str
    checkpoint: Position
    messages_behind: int
    oldest_undelivered_age: float
    parked_messages: int
    oldest_parked_age: float


def subscription_figures(
    conn: psycopg.Connection[Any], subscriptions: list[str]
) -> list[SubscriptionFigures]:
    rows = conn.execute(
        QUERIES["metrics_subscription_figures"], {"subscriptions": subscriptions}
    ).fetchall()
    return [
        SubscriptionFigures(name, Position(transaction_id, position), *figures)
        for name, transaction_id, position, *figures in rows
    ]


def safe_frontier_holder_age(conn: psycopg.Connection[Any]) -> float | None:
    """Seconds the transaction holding back the safe frontier has been open: 0.0 when no
    transaction holds an xid, None when its session is hidden from this role (PostgreSQL
    shows other users' transaction start only to pg_read_all_stats)."""
    row = conn.execute(QUERIES["safe_frontier_holder_age"]).fetchone()
    return 0.0 if row is None else row[0]


class BlockingTransaction(NamedTuple):
    """An open transaction that holds back committed messages of a subscription."""

    kind: str  # "session" or "prepared transaction"
    pid: int | None  # None for a prepared transaction
    application: str | None  # a prepared transaction's gid
    user: str | None
    database: str | None
    age: float


class BlockedDelivery(NamedTuple):
    """Committed messages of a subscription the safe frontier still hides, and the oldest of
    the transactions that hold them back (empty when none is visible to this role)."""

    subscription: str
    messages: int
    blockers: list[BlockingTransaction]


def blocked_deliveries(
    conn: psycopg.Connection[Any],
    subscriptions: list[str],
    *,
    per_subscription: int,
    minimum_age_seconds: float,
) -> list[BlockedDelivery]:
    """Per subscription; at most `per_subscription` blockers, oldest first, each open for
    `minimum_age_seconds` or more (a writer's ordinary transaction is left out)."""
    rows = conn.execute(
        QUERIES["metrics_blocked_deliveries"],
        {
            "subscriptions": subscriptions,
            "per_subscription": per_subscription,
            "minimum_age_seconds": minimum_age_seconds,
        },
    ).fetchall()
    blocked: dict[str, BlockedDelivery] = {}
    for name, messages, kind, *blocker in rows:
        entry = blocked.setdefault(name, BlockedDelivery(name, messages, []))
        if kind is not None:
            entry.blockers.append(BlockingTransaction(kind, *blocker))
    return list(blocked.values())


class RetentionHold(NamedTuple):
    """The holder of the oldest partition that one kind of holder keeps from retention."""

    kind: str  # subscription, spark, consumer or parked
    holder: str
    seconds: float


def retention_holds(conn: psycopg.Connection[Any]) -> list[RetentionHold]:
    """One per kind that holds any partition back (none: retention may retire them all)."""
    return [RetentionHold(*row) for row in conn.execute(QUERIES["metrics_retention_holders"])]


class ArchiveLag(NamedTuple):
    """How far a publication's archive is behind its messages."""

    publication: str
    messages: int
    """The publication's messages not archived yet."""
    seconds: float
    """How long ago the oldest of them was appended (0.0 when none)."""


def archive_lags(conn: psycopg.Connection[Any]) -> list[ArchiveLag]:
    """One per archived publication (none without archives)."""
    return [ArchiveLag(*row) for row in archive_catalog.archive_lag(conn)]
