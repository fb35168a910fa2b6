"""The source's queries find rows through the delivery-order index, and never sort table rows
(only the few rows a LIMIT or an aggregate has already cut), except where order is promised."""

import json
import re
from typing import Any

import psycopg
import pytest
from psycopg import sql

from outbox.positions import Position
from outbox.read_servers import ReadProof, server_state
from outbox_spark.copy_reader import slice_statement
from outbox_spark.partitions import Slice
from outbox_spark.queries import spark_queries

TRANSACTIONS, ROWS_PER_TRANSACTION = 100, 2000
# The name PostgreSQL gives each partition's copy of messages_delivery_order (cut to 63 bytes).
PARTITION_DELIVERY_INDEX = r"messages_from_\d+_publication_id_transaction_id_positio?n?_idx"


def plan_nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    nodes = [plan]
    for child in plan.get("Plans", []):
        nodes.extend(plan_nodes(child))
    return nodes  # the root first


@pytest.fixture(scope="module")
def batch() -> dict[str, Any]:
    return {}


@pytest.fixture(scope="module")
def explain(database_factory: Any, batch: dict[str, Any]) -> Any:
    url = database_factory.create()
    conn = psycopg.connect(url, autocommit=True)
    # Several publications, so the index is needed to find one of them, and many
    # transactions, so a batch is a small part of the table, as it is in production.
    for first in range(0, TRANSACTIONS * ROWS_PER_TRANSACTION, ROWS_PER_TRANSACTION):
        conn.execute(
            "INSERT INTO outbox.messages (publication_id, message_id, message_type, data)"
            " SELECT 'publication-' || (n %% 20), n::text, 'T', '{}'"
            " FROM generate_series(%s::int, %s::int) AS n",
            [first + 1, first + ROWS_PER_TRANSACTION],
        )
    conn.execute("ANALYZE outbox.messages")
    # A batch of five transactions in the middle of the table.
    rows = conn.execute(
        "SELECT DISTINCT transaction_id::text::bigint, max(position) OVER"
        " (PARTITION BY transaction_id) FROM outbox.messages ORDER BY 1"
    ).fetchall()
    after, until = Position(*rows[50]), Position(*rows[55])
    batch.update(
        publication="publication-3",
        after=after,
        until=until,
        after_transaction_id=str(after.transaction_id),
        after_position=after.position,
        until_transaction_id=str(until.transaction_id),
        until_position=until.position,
        limit=500,
        slices=4,
        # Batch ends prove their server (read_server_proven), as they do on a hot standby.
        **ReadProof(server_state(conn).identity, "the database itself").query_parameters(),
    )

    # The partitions made ahead of the writers are empty; the planner reads an empty table
    # with a sequential scan of its zero pages, which costs nothing, so those are left out.
    empty = {
        name
        for (name,) in conn.execute(
            "SELECT partition_name FROM outbox.message_partitions() AS p"
            " WHERE NOT EXISTS (SELECT FROM outbox.messages AS m"
            "                   WHERE m.position >= p.first_position"
            "                     AND m.position < p.end_position)"
        )
    }

    def plan_of(
        query: sql.Composable, parameters: dict[str, Any] | None = None
    ) -> list[dict[str, Any]]:
        row = conn.execute(sql.SQL("EXPLAIN (FORMAT JSON) {}").format(query), parameters).fetchone()
        assert row is not None
        document = row[0] if isinstance(row[0], list) else json.loads(row[0])
        nodes = plan_nodes(document[0]["Plan"])
        return [node for node in nodes if node.get("Relation Name") not in empty]

    yield plan_of
    conn.close()
    database_factory.drop(url)


def assert_uses_the_delivery_index(nodes: list[dict[str, Any]]) -> None:
    node_types = [node["Node Type"] for node in nodes]
    assert "Seq Scan" not in node_types, node_types
    scans = {node["Index Name"] for node in nodes if "Index Name" in node}
    # outbox.messages is partitioned by position: each partition has its copy of the index.
    assert scans, node_types
    assert all(re.fullmatch(PARTITION_DELIVERY_INDEX, scan) for scan in scans), scans


def sorts_table_rows(node: dict[str, Any], below_sort: bool = False) -> bool:
    """A Sort with a scan of outbox.messages under it and no Limit or aggregate in between
    that leaves a handful of rows."""
    if below_sort and node["Node Type"] in ("Limit", "Aggregate") and node["Plan Rows"] <= 10:
        return False
    if below_sort and str(node.get("Relation Name", "")).startswith("messages"):
        return True
    below_sort = below_sort or node["Node Type"] in ("Sort", "Incremental Sort")
    return any(sorts_table_rows(child, below_sort) for child in node.get("Plans", []))


@pytest.mark.parametrize("name", ["spark_last_safe_row", "spark_batch_end"])
def test_the_driver_queries_walk_the_index_without_sorting_rows(
    explain: Any, batch: dict[str, Any], name: str
) -> None:
    nodes = explain(sql.SQL(spark_queries()[name]), batch)
    assert_uses_the_delivery_index(nodes)
    assert not sorts_table_rows(nodes[0]), [node["Node Type"] for node in nodes]


def scans_outside_a_limit(node: dict[str, Any], under_limit: bool = False) -> list[str]:
    """The scans of outbox.messages with no Limit above them: each may read a whole range."""
    if str(node.get("Relation Name", "")).startswith("messages") and not under_limit:
        return [node["Node Type"]]
    under_limit = under_limit or node["Node Type"] == "Limit"
    return [
        scan
        for child in node.get("Plans", [])
        for scan in scans_outside_a_limit(child, under_limit)
    ]


def test_split_points_are_index_probes_that_never_read_the_batch(
    explain: Any, batch: dict[str, Any]
) -> None:
    """Counting the batch to cut it read every row of it a second time on every trigger (a
    tenth or more of a 1M-row trigger); the cuts are probes of a few index entries each: the
    batch's first row in delivery order, then the rows at evenly spaced positions."""
    nodes = explain(sql.SQL(spark_queries()["spark_split_points"]), batch)
    node_types = [node["Node Type"] for node in nodes]
    assert "Aggregate" not in node_types, node_types  # the count of the batch
    assert "Seq Scan" not in node_types, node_types
    assert not scans_outside_a_limit(nodes[0]), node_types
    assert not sorts_table_rows(nodes[0]), node_types
    scans = {node["Index Name"] for node in nodes if "Index Name" in node}
    assert any(re.fullmatch(PARTITION_DELIVERY_INDEX, scan) for scan in scans), scans
    assert any(re.fullmatch(r"messages_from_\d+_pkey", scan) for scan in scans), scans


def test_a_range_slice_is_read_through_the_index_without_sorting(
    explain: Any, batch: dict[str, Any]
) -> None:
    nodes = explain(slice_statement(batch["publication"], Slice(batch["after"], batch["until"])))
    assert_uses_the_delivery_index(nodes)
    assert not sorts_table_rows(nodes[0]), [node["Node Type"] for node in nodes]


def test_a_key_bucket_is_read_through_the_index(explain: Any, batch: dict[str, Any]) -> None:
    # It sorts when the planner finds that cheaper: its order is promised per key.
    part = Slice(batch["after"], batch["until"], 1, 3)
    assert_uses_the_delivery_index(explain(slice_statement(batch["publication"], part)))
