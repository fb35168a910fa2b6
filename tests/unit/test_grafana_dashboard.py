"""The Grafana dashboard (deploy/grafana/outbox-poller.json) is one Grafana imports as it is:
a schema version, a data source chosen at import (a variable, no uid of anyone's Grafana),
panels that do not overlap. What its queries name is checked against a real Prometheus in
tests/acceptance/test_prometheus_monitoring.py."""

import json
import re
from typing import Any

from tests.support.prometheus import DASHBOARD, metric_names

DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}


def dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return loaded


def test_it_names_its_schema_and_picks_its_data_source_at_import() -> None:
    board = dashboard()
    assert isinstance(board["schemaVersion"], int)
    assert board["uid"]
    assert board["title"]
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    for variable in variables.values():
        if variable["type"] == "query":
            assert variable["datasource"] == DATASOURCE, variable["name"]


def test_every_panel_and_query_uses_the_data_source_variable() -> None:
    panels = [p for p in dashboard()["panels"] if p["type"] != "row"]
    assert len(panels) >= 12
    for panel in panels:
        assert panel["datasource"] == DATASOURCE, panel["title"]
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target["datasource"] == DATASOURCE, panel["title"]
            assert target["expr"].strip(), panel["title"]


def test_panels_have_unique_ids_and_do_not_overlap() -> None:
    panels = dashboard()["panels"]
    assert len({p["id"] for p in panels}) == len(panels)
    cells: dict[tuple[int, int], str] = {}
    for panel in panels:
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24, panel["title"]
        for x in range(grid["x"], grid["x"] + grid["w"]):
            for y in range(grid["y"], grid["y"] + grid["h"]):
                assert (x, y) not in cells, f"{panel['title']} overlaps {cells[(x, y)]}"
                cells[(x, y)] = panel["title"]


def test_it_shows_what_the_issue_asks_for() -> None:
    names = set()
    for panel in dashboard()["panels"]:
        for target in panel.get("targets", []):
            names |= metric_names(target["expr"])
    for wanted in (
        "outbox_lag_messages",
        "outbox_messages_delivered_total",
        "outbox_handler_duration_seconds_bucket",
        "outbox_messages_retried_total",
        "outbox_parked_messages",
        "outbox_relay_messages_published_total",
        "outbox_relay_broker_errors_total",
        "outbox_shard_leader_alive",
        "outbox_blocking_transaction_age_seconds",
    ):
        assert wanted in names


def test_metric_names_are_told_from_functions_labels_and_keywords() -> None:
    expression = (
        "histogram_quantile(0.95, sum by (relay, le) (rate(outbox_relay_publish_seconds_bucket"
        '{relay=~"$relay", kind="a b"}[5m]))) > on (relay) group_left (kind) outbox_x offset 5m'
        " and up unless absent(outbox_y) or 1e3 * outbox_z"
    )
    assert metric_names(expression) == {
        "outbox_relay_publish_seconds_bucket",
        "outbox_x",
        "up",
        "outbox_y",
        "outbox_z",
    }


def test_every_query_follows_the_job_variable() -> None:
    """The `job` variable picks the daemons a board shows: each selector of every panel's
    query filters by it (one that does not mixes in every other job's series)."""
    for panel in dashboard()["panels"]:
        for target in panel.get("targets", []):
            expression = target["expr"]
            for name in metric_names(expression):
                selectors = re.findall(
                    rf"(?<![\w:]){re.escape(name)}(?![\w:])(\{{[^}}]*\}})?", expression
                )
                for selector in selectors:
                    assert 'job=~"$job"' in selector, f"{panel['title']}: {name} in {expression}"
