"""What operators do to subscriptions (the CLI's verbs), one short transaction each."""

import json
from typing import Any

import psycopg

from outbox.messages import check_name
from outbox.queries import QUERIES
from poller.positions import START, Position
from poller.reader import safe_frontier
from poller.subscription_records import SubscriptionRecord, settings_from_stored

# The largest bigint: a checkpoint at (frontier - 1, MAX_POSITION) is past every row of every
# transaction below the frontier, and before every row of transactions still running.
MAX_POSITION = 2**63 - 1


class SubscriptionError(ValueError):
    """An operator asked for something that cannot be done; the message says why."""


def resolve_start(conn: psycopg.Connection[Any], start: str) -> Position:
    """`start`, `end` or TX:POS. `end` is the safe frontier, never the newest visible row: a
    transaction still open below the newest row would otherwise be skipped when it commits."""
    if start == "start":
        return START
    if start == "end":
        return Position(max(safe_frontier(conn) - 1, 0), MAX_POSITION)
    try:
        return Position.parse(start)
    except ValueError:
        raise SubscriptionError(f"--from/--to {start!r} is not start, end or TX:POS") from None


def create(
    conn: psycopg.Connection[Any],
    name: str,
    publication: str,
    start: str,
    settings: dict[str, Any],
) -> Position:
    check_name("subscription", name)
    check_name("publication", publication)
    settings_from_stored(settings)  # refuse bad settings before storing them
    at = resolve_start(conn, start)
    row = conn.execute(
        QUERIES["create_subscription"],
        {
            "subscription": name,
            "publication": publication,
            "transaction_id": str(at.transaction_id),
            "position": at.position,
            "settings": json.dumps(settings),
        },
    ).fetchone()
    if row is None:
        raise SubscriptionError(f"subscription {name!r} already exists")
    return at


def get(conn: psycopg.Connection[Any], name: str) -> SubscriptionRecord:
    row = conn.execute(QUERIES["get_subscription"], {"subscription": name}).fetchone()
    if row is None:
        raise SubscriptionError(f"subscription {name!r} does not exist")
    return SubscriptionRecord.from_row(row)


def list_all(conn: psycopg.Connection[Any]) -> list[SubscriptionRecord]:
    return [SubscriptionRecord.from_row(r) for r in conn.execute(QUERIES["list_subscriptions"])]


def delete(conn: psycopg.Connection[Any], name: str) -> None:
    if conn.execute(QUERIES["delete_subscription"], {"subscription": name}).fetchone() is None:
        raise SubscriptionError(f"subscription {name!r} does not exist")


def update_settings(conn: psycopg.Connection[Any], name: str, changes: dict[str, Any]) -> None:
    merged = {**get(conn, name).stored_settings, **changes}
    settings_from_stored(merged)
    conn.execute(
        QUERIES["update_subscription_settings"],
        {"subscription": name, "settings": json.dumps(merged)},
    )


def seek(conn: psycopg.Connection[Any], name: str, to: str) -> tuple[Position, int]:
    at = resolve_start(conn, to)
    row = conn.execute(
        QUERIES["seek_subscription"],
        {
            "subscription": name,
            "transaction_id": str(at.transaction_id),
            "position": at.position,
        },
    ).fetchone()
    if row is None:
        raise SubscriptionError(f"subscription {name!r} does not exist")
    return at, int(row[0])


def request_replay(conn: psycopg.Connection[Any], name: str) -> None:
    """A running leader re-delivers the parked messages; the request is for that leader, so
    without one it would wait unseen (a new leader starts from the stored request count)."""
    get(conn, name)
    alive = conn.execute(QUERIES["leader_alive"], {"subscription": name}).fetchone()
    if not alive or not alive[0]:
        raise SubscriptionError(
            f"no daemon leads {name!r}: start `outbox poll --subscription {name}` first"
        )
    conn.execute(QUERIES["request_replay"], {"subscription": name})


def list_parked(conn: psycopg.Connection[Any], name: str, limit: int) -> list[tuple[Any, ...]]:
    get(conn, name)
    return conn.execute(QUERIES["list_parked"], {"subscription": name, "limit": limit}).fetchall()


def purge_parked(conn: psycopg.Connection[Any], name: str) -> int:
    get(conn, name)
    return conn.execute(QUERIES["purge_parked"], {"subscription": name}).rowcount


def status(conn: psycopg.Connection[Any]) -> list[tuple[Any, ...]]:
    return conn.execute(QUERIES["subscription_status"]).fetchall()
