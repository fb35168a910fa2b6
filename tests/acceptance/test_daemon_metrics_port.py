"""`outbox poll --metrics-port`: a real daemon process scraped over HTTP, and the values the
option refuses."""

import socket
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from tests.acceptance.test_daemon_hardening import HOSTILE, append_typed
from tests.support.cli import outbox_command
from tests.support.daemons import (
    DaemonGroup,
    create_handled_table,
    daemon_group,
    terminate_daemon_backends,
    wait_until,
)
from tests.support.metrics_scrape import free_port, get, scrape, value
from tests.support.stored import create_subscription
from tests.support.writers import append_committed


@pytest.fixture
def daemons(database_url: str, tmp_path: Path) -> Iterator[DaemonGroup]:
    create_handled_table(database_url)
    with daemon_group(database_url, tmp_path) as group:
        yield group


def leases(url: str) -> int:
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT count(*) FROM outbox.subscription_leaders").fetchone()
    assert row is not None
    return int(row[0])


@pytest.mark.slow
def test_a_daemon_process_serves_metrics_and_probes_through_lost_sessions(
    database_url: str, daemons: DaemonGroup
) -> None:
    create_subscription(database_url, "sub", "pub", max_retry_count=2, retry_backoff_initial=0.01)
    port = free_port()
    daemon = daemons.start("sub", "--metrics-port", str(port), handler=HOSTILE)
    wait_until(lambda: get(port, "/readyz")[0] == 200, 30, "the daemon ready")
    append_committed(database_url, "pub", 3)
    append_typed(database_url, "pub", "RaisesNul")  # fails every attempt, then parked
    sub = {"subscription": "sub"}
    series = wait_until(
        lambda: (
            s
            if value(s := scrape(port), "outbox_messages_parked_total", **sub) == 1
            and value(s, "outbox_lag_messages", **sub) == 0
            else None
        ),
        30,
        "three delivered, one parked, the checkpoint at the end",
    )
    assert value(series, "outbox_messages_delivered_total", **sub) == 3
    assert value(series, "outbox_messages_failed_total", **sub) == 2
    assert value(series, "outbox_messages_retried_total", **sub) == 1
    assert value(series, "outbox_parked_messages", **sub) == 1
    assert value(series, "outbox_leader", **sub) == 1

    assert terminate_daemon_backends(database_url)
    wait_until(
        lambda: get(port, "/readyz") == (200, "ready: sub: leader\n"),
        30,
        "the daemon leading again after its sessions were terminated",
    )
    append_committed(database_url, "pub", 2)
    wait_until(
        lambda: value(scrape(port), "outbox_messages_delivered_total", **sub) == 5,
        30,
        "the counters going on from where they were",
    )
    assert get(port, "/healthz") == (200, "alive\n")
    assert get(port, "/nothing")[0] == 404
    assert daemon.terminate() == 0
    assert not daemon.errors(), daemon.log()


@pytest.mark.parametrize("port", ["0", "65536", "-1", "http"])
def test_a_bad_metrics_port_is_refused_in_one_line(database_url: str, port: str) -> None:
    create_subscription(database_url, "sub", "pub")
    arguments = ["poll", "--subscription", "sub", "--handler", "json:loads"]
    done = outbox_command([*arguments, "--metrics-port", port], database_url)
    assert done.returncode == 2
    # One error line naming the value (a value click cannot parse also gets its usage hint).
    errors = [line for line in done.stderr.splitlines() if line.startswith("Error: ")]
    assert len(errors) == 1, done.stderr
    assert "metrics" in errors[0]
    assert f"{port}" in errors[0]
    assert "Traceback" not in done.stderr
    assert leases(database_url) == 0


def test_a_taken_metrics_port_fails_in_one_line_before_leading(database_url: str) -> None:
    create_subscription(database_url, "sub", "pub")
    with socket.socket() as taken:
        taken.bind(("", 0))
        taken.listen()
        port = taken.getsockname()[1]
        arguments = ["poll", "--subscription", "sub", "--handler", "json:loads"]
        done = outbox_command([*arguments, "--metrics-port", str(port)], database_url)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        f"Error: cannot serve metrics on port {port}: Address already in use"
    ]
    assert leases(database_url) == 0
