"""A Spark query's progress in outbox.subscriptions: forward only, and only its own row."""

from typing import Any

import psycopg
import pytest

from outbox.positions import Position
from outbox_spark.progress import SubscriptionConflictError, record_progress, start_subscription


def row_of(conn: psycopg.Connection[Any], subscription: str) -> tuple[Any, ...] | None:
    return conn.execute(
        "SELECT publication_id, last_processed_transaction_id::text::bigint,"
        " last_processed_position, settings FROM outbox.subscriptions"
        " WHERE subscription_id = %s",
        [subscription],
    ).fetchone()


def test_progress_moves_forward_only_comparing_transaction_ids_as_numbers(
    database_url: str,
) -> None:
    with psycopg.connect(database_url, autocommit=True) as conn:
        start_subscription(conn, "lake", "orders", Position(0, 0))
        assert row_of(conn, "lake") == ("orders", 0, 0, {"kind": "spark"})

        record_progress(conn, "lake", "orders", Position(999, 5))
        record_progress(conn, "lake", "orders", Position(1000, 1))
        assert row_of(conn, "lake") == ("orders", 1000, 1, {"kind": "spark"})

        # Spark commits the last offset again on restart, and never an older one, but if it did:
        record_progress(conn, "lake", "orders", Position(1000, 1))
        record_progress(conn, "lake", "orders", Position(999, 9))
        assert row_of(conn, "lake") == ("orders", 1000, 1, {"kind": "spark"})


def test_a_commit_creates_the_row_if_the_start_did_not(database_url: str) -> None:
    with psycopg.connect(database_url, autocommit=True) as conn:
        record_progress(conn, "lake", "orders", Position(7, 3))
        assert row_of(conn, "lake") == ("orders", 7, 3, {"kind": "spark"})


def test_a_query_starting_without_a_checkpoint_moves_the_row_back_to_its_start(
    database_url: str,
) -> None:
    with psycopg.connect(database_url, autocommit=True) as conn:
        record_progress(conn, "lake", "orders", Position(1000, 1))
        start_subscription(conn, "lake", "orders", Position(0, 0))
        assert row_of(conn, "lake") == ("orders", 0, 0, {"kind": "spark"})


@pytest.mark.parametrize("write", [start_subscription, record_progress])
def test_an_id_owned_by_another_publication_or_the_poller_is_refused(
    database_url: str, write: Any
) -> None:
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO outbox.subscriptions (subscription_id, publication_id) VALUES"
            " ('poller-sub', 'orders')"
        )
        start_subscription(conn, "lake", "invoices", Position(0, 0))

        with pytest.raises(SubscriptionConflictError, match=r"'poller-sub'.*kind None"):
            write(conn, "poller-sub", "orders", Position(5, 5))
        with pytest.raises(SubscriptionConflictError, match="belongs to publication 'invoices'"):
            write(conn, "lake", "orders", Position(5, 5))

        assert row_of(conn, "poller-sub") == ("orders", 0, 0, {})
        assert row_of(conn, "lake") == ("invoices", 0, 0, {"kind": "spark"})
