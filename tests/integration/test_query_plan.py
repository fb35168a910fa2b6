"""The poll query must walk the index in delivery order: no Sort node, no sequential scan."""

import json
from typing import Any

import psycopg
import pytest

from outbox.queries import QUERIES
from poller.store.message_reads import prepare_reader


def plan_nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    nodes = [plan]
    for child in plan.get("Plans", []):
        nodes.extend(plan_nodes(child))
    return nodes


def read_plan_nodes(conn: psycopg.Connection[Any], after: tuple[str, int]) -> list[dict[str, Any]]:
    query = "EXPLAIN (FORMAT JSON) " + QUERIES["read_batch"]
    row = conn.execute(
        query,
        {
            "publication": "publication-3",
            "after_transaction_id": after[0],
            "after_position": after[1],
            "limit": 500,
        },
    ).fetchone()
    assert row is not None
    document = row[0] if isinstance(row[0], list) else json.loads(row[0])
    return plan_nodes(document[0]["Plan"])


@pytest.mark.parametrize("where", ["start", "deep in one large transaction"])
def test_the_poll_query_uses_the_delivery_order_index_without_sorting(
    database_url: str, where: str
) -> None:
    """Deep in one transaction the planner estimated one row left and sorted all the rest
    on every page, until the read connection turned sorts off (prepare_reader)."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        # Several publications, so the index is needed to find one of them; one transaction.
        conn.execute(
            "INSERT INTO outbox.messages (publication_id, message_id, message_type, data)"
            " SELECT 'publication-' || (n % 20), n::text, 'T', '{}'"
            " FROM generate_series(1, 200000) AS n"
        )
        conn.execute("ANALYZE outbox.messages")
        row = conn.execute(
            "SELECT transaction_id::text, max(position) / 2 FROM outbox.messages GROUP BY 1"
        ).fetchone()
        assert row is not None
        after = ("0", 0) if where == "start" else (row[0], row[1])
        prepare_reader(conn)
        nodes = read_plan_nodes(conn, after)
    node_types = [node["Node Type"] for node in nodes]
    assert "Sort" not in node_types, node_types
    assert "Incremental Sort" not in node_types, node_types
    assert "Seq Scan" not in node_types, node_types
    scans = [node for node in nodes if node["Node Type"] in ("Index Scan", "Index Only Scan")]
    # outbox.messages is partitioned: one scan per partition, each of them on that partition's
    # copy of messages_delivery_order, merged in order (Merge Append) rather than sorted.
    assert scans, node_types
    assert {scan["Index Name"] for scan in scans} <= delivery_order_indexes(database_url)


def delivery_order_indexes(database_url: str) -> set[str]:
    with psycopg.connect(database_url) as conn:
        rows = conn.execute(
            "SELECT i.inhrelid::regclass::text FROM pg_inherits AS i"
            " WHERE i.inhparent = 'outbox.messages_delivery_order'::regclass"
        ).fetchall()
    # regclass prints schema-qualified names when outbox is not on the search_path.
    return {name.rpartition(".")[2] for (name,) in rows}
