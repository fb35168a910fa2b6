"""The statements a metrics scrape runs (sync psycopg, on the HTTP server's thread)."""

from typing import Any, NamedTuple

import psycopg

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
