"""The poll query must walk the index in delivery order: no Sort node, no sequential scan."""

import json
from typing import Any

import psycopg

from outbox.queries import QUERIES


def plan_nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    nodes = [plan]
    for child in plan.get("Plans", []):
        nodes.extend(plan_nodes(child))
    return nodes


def test_the_poll_query_uses_the_delivery_order_index_without_sorting(database_url: str) -> None:
    with psycopg.connect(database_url, autocommit=True) as conn:
        # Several publications, so the index is needed to find one of them.
        conn.execute(
            "INSERT INTO outbox.messages (publication_id, message_id, message_type, data)"
            " SELECT 'publication-' || (n % 20), n::text, 'T', '{}'"
            " FROM generate_series(1, 200000) AS n"
        )
        conn.execute("ANALYZE outbox.messages")
        query = "EXPLAIN (FORMAT JSON) " + QUERIES["read_batch"]
        row = conn.execute(
            query,
            {
                "publication": "publication-3",
                "after_transaction_id": "0",
                "after_position": 0,
                "limit": 500,
            },
        ).fetchone()
    assert row is not None
    document = row[0] if isinstance(row[0], list) else json.loads(row[0])
    nodes = plan_nodes(document[0]["Plan"])
    node_types = [node["Node Type"] for node in nodes]
    assert "Sort" not in node_types, node_types
    assert "Incremental Sort" not in node_types, node_types
    assert "Seq Scan" not in node_types, node_types
    scans = [node for node in nodes if node["Node Type"] in ("Index Scan", "Index Only Scan")]
    assert [scan["Index Name"] for scan in scans] == ["messages_delivery_order"]
