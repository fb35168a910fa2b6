"""The alert rules and the Grafana dashboard against a real Prometheus (Debian's binary) that
scrapes real daemons: an `outbox poll` that delivered, failed, retried and parked messages, a
relay publishing to NATS and a relay whose broker is down. One Prometheus and one set of
daemons serve the whole session (they take seconds to start); every wait is on a condition.

What the rules are unit-tested for (thresholds, `for`, every alert) is promtool's part
(test_alert_rules.py); here the expressions meet the series a daemon really serves, with
their real labels, and the alerts fire, name what they must, and resolve."""

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest

import outbox
from tests.acceptance.test_daemon_hardening import HOSTILE, append_typed
from tests.support import brokers
from tests.support.broker_streams import Destination, nats_stream
from tests.support.daemons import create_handled_table, daemon_group, wait_until
from tests.support.databases import DatabaseFactory, database_name
from tests.support.metrics_scrape import free_port, get
from tests.support.prometheus import (
    DASHBOARD,
    RULES,
    PrometheusServer,
    metric_names,
    rules_for_a_short_test,
    served_names,
    tool,
)
from tests.support.stored import create_subscription
from tests.support.writers import append_committed

# What Grafana puts in place of the dashboard's variables, for a query Prometheus can run.
VARIABLES = {"$__rate_interval": "1m", "$subscription": ".*", "$job": ".*"}


@dataclass
class Monitored:
    """The daemons Prometheus scrapes, on their own database."""

    url: str
    poll_port: int
    relay_port: int | None  # None without NATS on this machine
    down_relay_port: int

    @property
    def ports(self) -> list[int]:
        return [p for p in (self.poll_port, self.relay_port, self.down_relay_port) if p]


@pytest.fixture(scope="session")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrometheusServer]:
    tool("prometheus")
    rules = rules_for_a_short_test(RULES.read_text())
    with PrometheusServer.running(tmp_path_factory.mktemp("prometheus"), rules) as server:
        yield server


@pytest.fixture(scope="session")
def monitored(
    prometheus: PrometheusServer,
    database_factory: DatabaseFactory,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Monitored]:
    url = database_factory.create()
    stream: Destination | None = None
    try:
        create_handled_table(url)
        create_subscription(url, "sub", "orders", max_retry_count=2, retry_backoff_initial=0.01)
        create_subscription(url, "to-nats", "events")
        create_subscription(url, "to-nowhere", "events")
        with daemon_group(url, tmp_path_factory.mktemp("daemons")) as daemons:
            ports = Monitored(url, free_port(), None, free_port())
            daemons.start("sub", "--metrics-port", str(ports.poll_port), handler=HOSTILE)
            nowhere = f"nats://127.0.0.1:{free_port()}?subject=nowhere.{{partition_key}}"
            daemons.start(
                "to-nowhere", "--metrics-port", str(ports.down_relay_port), relay_to=nowhere
            )
            if brokers.answers(*brokers.NATS[1:]):
                stream = nats_stream()
                ports.relay_port = free_port()
                daemons.start(
                    "to-nats",
                    "--metrics-port",
                    str(ports.relay_port),
                    relay_to=stream.url(brokers.NATS[2]),
                )
            prometheus.scrape(ports.ports)

            append_committed(url, "orders", 3)
            append_typed(url, "orders", "RaisesNul")  # fails every attempt, then parked
            with psycopg.connect(url) as conn:
                for key in ("a", "b", "c"):
                    outbox.append(conn, "events", "Placed", {}, partition_key=key)
            delivered = 'outbox_messages_delivered_total{subscription="sub"}'
            parked = 'outbox_messages_parked_total{subscription="sub"}'
            wait_until(
                lambda: prometheus.value(delivered) == 3 and prometheus.value(parked) == 1,
                30,
                "Prometheus to see three delivered and one parked",
            )
            yield ports
    finally:
        if stream is not None:
            stream.remove()
        database_factory.drop(url)


def test_the_blocked_delivery_alert_names_the_open_transaction_and_resolves_when_it_ends(
    prometheus: PrometheusServer, monitored: Monitored
) -> None:
    def blocked_by(pid: int) -> list[dict[str, Any]]:
        return [
            alert
            for alert in prometheus.alerts("OutboxDeliveryBlockedByTransaction")
            if alert["labels"].get("pid") == str(pid) and alert["state"] == "firing"
        ]

    with psycopg.connect(monitored.url, application_name="left-open-by-test") as held:
        held.execute("SELECT pg_current_xact_id()")  # an xid, as any write would take
        pid = held.info.backend_pid
        append_committed(monitored.url, "orders", 2)  # committed behind it: they wait
        [alert] = wait_until(lambda: blocked_by(pid), 30, "the alert to fire, naming the session")
        assert alert["labels"] == {
            "alertname": "OutboxDeliveryBlockedByTransaction",
            "severity": "critical",
            "subscription": "sub",
            "kind": "session",
            "pid": str(pid),
            "application": "left-open-by-test",
            "user": held.info.user,
            "database": database_name(monitored.url),
        }
        summary = alert["annotations"]["summary"]
        assert summary.startswith(f"sub: delivery blocked by session pid {pid} (user ")
        assert "application left-open-by-test" in summary
        assert f"SELECT pg_terminate_backend({pid})" in alert["annotations"]["runbook"]
        waiting = prometheus.value('outbox_blocked_messages{subscription="sub"}')
        assert waiting == 2
        held.rollback()

    wait_until(lambda: not blocked_by(pid), 30, "the alert to resolve once the transaction ended")
    wait_until(
        lambda: prometheus.value('outbox_messages_delivered_total{subscription="sub"}') == 5,
        30,
        "the two messages delivered",
    )


def test_the_relay_alert_fires_for_the_relay_whose_broker_is_down_alone(
    prometheus: PrometheusServer, monitored: Monitored
) -> None:
    def failing() -> set[str]:
        alerts = prometheus.alerts("OutboxRelayFailing")
        return {a["labels"]["relay"] for a in alerts if a["state"] == "firing"}

    relays = wait_until(failing, 30, "the relay alert to fire")
    assert len(relays) == 1
    assert "nowhere." in relays.pop()
    if monitored.relay_port is not None:  # the relay to a broker that answers: no alert
        instance = f'instance="127.0.0.1:{monitored.relay_port}"'
        published = f"sum(outbox_relay_messages_published_total{{{instance}}})"
        wait_until(lambda: prometheus.value(published) == 3, 30, "the NATS relay to publish")
        assert prometheus.value(f"outbox_relay_failing{{{instance}}}") == 0
        assert len(failing()) == 1


def test_every_dashboard_query_parses_and_names_only_metrics_the_daemons_serve(
    prometheus: PrometheusServer, monitored: Monitored
) -> None:
    served = known_names(prometheus, monitored)
    board = json.loads(DASHBOARD.read_text())
    queries = [
        (panel["title"], target["expr"])
        for panel in board["panels"]
        for target in panel.get("targets", [])
    ]
    assert len(queries) >= 20
    for title, expression in queries:
        concrete = grafana_substitutes(expression)
        prometheus.query(concrete)  # raises, naming Prometheus's error, if it does not parse
        names = metric_names(concrete)
        assert names, f"{title}: {expression} names no metric"
        assert names <= served, f"{title}: {sorted(names - served)} are not served"
    # The variables' label_values(METRIC, LABEL): the label is on that metric.
    for variable in board["templating"]["list"]:
        if variable["type"] != "query":
            continue
        match = re.fullmatch(r"label_values\((.+), (\w+)\)", variable["query"]["query"])
        assert match, variable["name"]
        selector, label = grafana_substitutes(match[1]), match[2]
        assert metric_names(selector) <= served
        values = prometheus.api(f"/api/v1/label/{label}/values", **{"match[]": selector})
        assert values, f"variable {variable['name']}: no {label} on {selector}"


def test_every_alert_rule_is_healthy_and_reads_only_metrics_the_daemons_serve(
    prometheus: PrometheusServer, monitored: Monitored
) -> None:
    served = known_names(prometheus, monitored) | {"up"}
    rules = [rule for group in prometheus.api("/api/v1/rules")["groups"] for rule in group["rules"]]
    assert len(rules) >= 10
    for rule in rules:
        # Evaluated every second by now: an expression Prometheus cannot run says so here.
        assert rule["health"] in ("ok", "unknown"), f"{rule['name']}: {rule.get('lastError')}"
        names = metric_names(rule["query"])
        assert names <= served, f"{rule['name']}: {sorted(names - served)} are not served"


def known_names(prometheus: PrometheusServer, monitored: Monitored) -> set[str]:
    """What the daemons serve: the sample names Prometheus stored from them, and every family
    their /metrics pages declare (a family with no sample now counts too)."""
    stored = set(
        prometheus.api("/api/v1/label/__name__/values", **{"match[]": '{job="outbox-poller"}'})
    )
    declared: set[str] = set()
    for port in monitored.ports:
        status, text = get(port, "/metrics")
        assert status == 200
        declared |= served_names(text)
    assert {"outbox_lag_messages", "outbox_relay_broker_errors_total"} <= stored
    return stored | declared


def grafana_substitutes(expression: str) -> str:
    for variable, value in VARIABLES.items():
        expression = expression.replace(variable, value)
    assert "$" not in expression, f"a variable the test does not know: {expression}"
    return expression
