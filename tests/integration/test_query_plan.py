"""The poll query must walk the index in delivery order: no Sort node, no sequential scan."""

import json
import re
from typing import Any

import psycopg
import pytest
from psycopg import sql

from outbox.queries import QUERIES
from outbox.read_servers import ReadProof, server_state
from poller.store.message_reads import prepare_reader


def plan_nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    nodes = [plan]
    for child in plan.get("Plans", []):
        nodes.extend(plan_nodes(child))
    return nodes


def read_parameters(conn: psycopg.Connection[Any], after: tuple[str, int]) -> dict[str, Any]:
    # The leader's read proves its server (read_server_proven), as it does on a hot standby.
    proof = ReadProof(server_state(conn).identity, "the database itself")
    return {
        "publication": "publication-3",
        "subscription": "sub",  # read_leader_batch: how far its one shard may read
        "shard_count": 1,
        "after_transaction_id": after[0],
        "after_position": after[1],
        "limit": 500,
        **proof.query_parameters(),
    }


def read_plan(conn: psycopg.Connection[Any], read: str, after: tuple[str, int]) -> dict[str, Any]:
    """The plan for these values (a custom plan: what an unprepared read gets)."""
    query = "EXPLAIN (FORMAT JSON) " + QUERIES[read]
    row = conn.execute(query, read_parameters(conn, after)).fetchone()
    return first_plan(row)


def generic_read_plan(
    conn: psycopg.Connection[Any], read: str, after: tuple[str, int]
) -> dict[str, Any]:
    """The plan the read connection keeps for every execution (prepare_reader: one generic
    plan), from a PREPARE of the read with $n in place of each named parameter."""
    names: list[str] = []

    def numbered(match: re.Match[str]) -> str:
        if match[1] not in names:
            names.append(match[1])
        return f"${names.index(match[1]) + 1}"

    text = re.sub(r"%\((\w+)\)s", numbered, QUERIES[read])
    conn.execute(f"PREPARE planned_read AS {text}")
    values = read_parameters(conn, after)
    explain = sql.SQL("EXPLAIN (FORMAT JSON) EXECUTE planned_read ({})").format(
        sql.SQL(", ").join(sql.Literal(values[name]) for name in names)
    )
    try:
        return first_plan(conn.execute(explain).fetchone())
    finally:
        conn.execute("DEALLOCATE planned_read")


def first_plan(row: tuple[Any, ...] | None) -> dict[str, Any]:
    assert row is not None
    document = row[0] if isinstance(row[0], list) else json.loads(row[0])
    plan: dict[str, Any] = document[0]["Plan"]
    return plan


# A leader runs read_leader_batch, a catch-up subscription read_batch_with_retired; read_batch
# is the demo's snapshot-safe reader and the benches' baseline.
@pytest.mark.parametrize("read", ["read_batch", "read_leader_batch", "read_batch_with_retired"])
@pytest.mark.parametrize("where", ["start", "deep in one large transaction"])
def test_the_poll_query_uses_the_delivery_order_index_without_sorting(
    database_url: str, where: str, read: str
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
        custom = read_plan(conn, read, after)
        generic = generic_read_plan(conn, read, after)
    assert_reads_in_delivery_order(custom, database_url)
    assert_reads_in_delivery_order(generic, database_url)


def assert_reads_in_delivery_order(plan: dict[str, Any], database_url: str) -> None:
    # read_batch_with_retired sorts its at most `limit` rows once more above the LIMIT (its
    # mark is joined to them); below the LIMIT, where the backlog is, nothing may be sorted.
    [limit] = [node for node in plan_nodes(plan) if node["Node Type"] == "Limit"]
    nodes = plan_nodes(limit)
    node_types = [node["Node Type"] for node in nodes]
    assert "Sort" not in node_types, node_types
    assert "Incremental Sort" not in node_types, node_types
    assert "Seq Scan" not in node_types, node_types
    scans = [
        node
        for node in nodes
        if node["Node Type"] in ("Index Scan", "Index Only Scan")
        # The mark, and read_leader_batch's bound from the subscription's row: looked up once.
        and node.get("Relation Name") not in ("retired_positions", "subscriptions")
    ]
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
