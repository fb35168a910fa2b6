"""A Spark query's progress, kept as a subscription row in outbox.subscriptions.

Status views then list Spark consumers beside the poller's, and retention, which keeps every
row after the slowest subscription's checkpoint, keeps whatever Spark may still replay: Spark
replays at most the batches after the last one it committed. The row's settings say
`{"kind": "spark"}`; the poller daemon must leave such rows alone.
"""

from typing import Any

import psycopg

from outbox.positions import Position
from outbox_spark.queries import spark_queries


class SubscriptionConflictError(RuntimeError):
    """The subscription id is taken by another publication or by a non-Spark consumer."""


def start_subscription(
    conn: psycopg.Connection[Any], subscription: str, publication: str, start: Position
) -> None:
    """Create or reset the row at a query's starting offset.

    Called only when a query starts without a Spark checkpoint: it will read from `start`,
    so the row moves there even if that is backwards, or retention could delete rows it is
    about to read.
    """
    _write(conn, "spark_start_subscription", subscription, publication, start)


def record_progress(
    conn: psycopg.Connection[Any], subscription: str, publication: str, end: Position
) -> None:
    """Move the row forward to `end`; idempotent, and never backwards.

    Spark commits the last offset again when a query restarts, and a conditional update on
    the row value makes any repeat or stale commit a no-op.
    """
    _write(conn, "spark_record_progress", subscription, publication, end)


def _write(
    conn: psycopg.Connection[Any],
    query: str,
    subscription: str,
    publication: str,
    position: Position,
) -> None:
    written = conn.execute(
        spark_queries()[query],
        {
            "subscription": subscription,
            "publication": publication,
            **position.query_parameters(),
        },
    ).fetchone()
    if written is not None:
        return
    owner = conn.execute(
        spark_queries()["spark_subscription_owner"], {"subscription": subscription}
    ).fetchone()
    assert owner is not None  # the upsert wrote nothing, so the row exists
    owner_publication, kind = owner
    if owner_publication != publication or kind != "spark":
        raise SubscriptionConflictError(
            f"subscription {subscription!r} (option subscription) already belongs to"
            f" publication {owner_publication!r} with kind {kind!r}; a Spark query needs a"
            f" subscription id of its own for publication {publication!r}"
        )
    # Otherwise the row is already at or past `position`: a repeated commit.
