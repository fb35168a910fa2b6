"""`metrics_port`: the daemon in-process on a real database, scraped over HTTP and parsed with
Prometheus's own text parser; /healthz and /readyz through a lost and regained database."""

import dataclasses
import re
import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from psycopg import sql

from poller.daemon.background import DaemonThread
from poller.daemon.options import DaemonOptions
from poller.message import Message
from tests.integration.test_daemon import append, subscribe
from tests.support.daemons import wait_until
from tests.support.databases import database_name
from tests.support.documentation import page
from tests.support.inprocess import FAST
from tests.support.metrics_scrape import Series, free_port, get, scrape, value


def with_port() -> DaemonOptions:
    return dataclasses.replace(FAST, metrics_port=free_port())


def scraped_when(port: int, condition: Callable[[Series], bool], what: str) -> Series:
    """Scrape until `condition` holds for a scrape, and return that scrape."""

    def holds() -> Series | None:
        series = scrape(port)
        return series if condition(series) else None

    return wait_until(holds, 30, what)


def test_counters_and_gauges_move_as_messages_are_delivered_failed_and_parked(
    database_url: str,
) -> None:
    subscribe(database_url, max_retry_count=3, retry_backoff_initial=0.01, retry_backoff_max=0.01)
    gate = threading.Event()

    def handler(message: Message) -> None:
        number = message.data["n"]
        if number == 0:
            gate.wait(30)  # holds the only slot: the rest wait in the buffer
        if number == 3:
            raise RuntimeError("always fails")

    # One delivery per run, so the five behind the held one stay buffered rather than
    # prefetched into its run (where in_flight would count them).
    options = dataclasses.replace(with_port(), prefetch=1)
    port = options.metrics_port
    assert port is not None
    with DaemonThread(database_url, ["sub"], handler, options):
        idle = scraped_when(
            port, lambda s: value(s, "outbox_leader", subscription="sub") == 1, "the daemon to lead"
        )
        assert value(idle, "outbox_messages_delivered_total", subscription="sub") == 0
        assert value(idle, "outbox_lag_messages", subscription="sub") == 0
        assert value(idle, "outbox_database_up") == 1

        positions = append(database_url, 6)
        busy = scraped_when(
            port,
            lambda s: (
                value(s, "outbox_in_flight_messages", subscription="sub") == 1
                and value(s, "outbox_buffered_messages", subscription="sub") == 5
            ),
            "the first message in its handler and five buffered",
        )
        assert value(busy, "outbox_lag_messages", subscription="sub") == 6
        lag_seconds = value(busy, "outbox_lag_seconds", subscription="sub")
        assert lag_seconds is not None
        assert lag_seconds > 0
        time.sleep(0.3)  # the held handler's duration must show in the histogram
        gate.set()

        done = scraped_when(
            port,
            lambda s: (
                value(s, "outbox_messages_parked_total", subscription="sub") == 1
                and value(s, "outbox_lag_messages", subscription="sub") == 0
            ),
            "the failing message parked and the checkpoint at the end",
        )
    sub = {"subscription": "sub"}
    assert value(done, "outbox_messages_delivered_total", **sub) == 5
    assert value(done, "outbox_messages_failed_total", **sub) == 3  # three attempts
    assert value(done, "outbox_messages_retried_total", **sub) == 2  # attempts 2 and 3
    assert value(done, "outbox_parked_messages", **sub) == 1
    parked_age = value(done, "outbox_oldest_parked_age_seconds", **sub)
    assert parked_age is not None
    assert parked_age > 0
    assert value(done, "outbox_in_flight_messages", **sub) == 0
    assert value(done, "outbox_buffered_messages", **sub) == 0
    assert value(done, "outbox_checkpoint_position", **sub) == positions[-1]
    durations = "outbox_handler_duration_seconds"
    assert value(done, f"{durations}_count", outcome="delivered", **sub) == 5
    assert value(done, f"{durations}_count", outcome="failed", **sub) == 3
    # The held call took over 0.3 s, the four others far less.
    assert value(done, f"{durations}_bucket", outcome="delivered", le="0.25", **sub) == 4
    assert value(done, f"{durations}_bucket", outcome="delivered", le="0.5", **sub) == 5


def test_every_metric_the_daemon_serves_is_in_the_readme(database_url: str) -> None:
    subscribe(database_url)
    options = with_port()
    assert options.metrics_port is not None
    with DaemonThread(database_url, ["sub"], lambda _: None, options):
        series = scraped_when(
            options.metrics_port,
            lambda s: value(s, "outbox_leader", subscription="sub") == 1,
            "the daemon to lead",
        )
    reference = page("reference/metrics.md").read_text()
    names = {re.sub(r"_(bucket|count|sum|created)$", "", name) for name, _ in series}
    assert len(names) >= 17
    assert not {name for name in names if f"`{name}" not in reference}


def test_a_handler_past_its_timeout_counts_as_failed_and_its_retry_as_retried(
    database_url: str,
) -> None:
    subscribe(database_url, message_timeout=0.2, retry_backoff_initial=0.01)

    def handler(message: Message) -> None:
        if message.delivery_attempt == 1:
            time.sleep(0.4)

    options = with_port()
    assert options.metrics_port is not None
    append(database_url, 1)
    with DaemonThread(database_url, ["sub"], handler, options):
        series = scraped_when(
            options.metrics_port,
            lambda s: value(s, "outbox_messages_delivered_total", subscription="sub") == 1,
            "the second attempt delivered",
        )
    sub = {"subscription": "sub"}
    assert value(series, "outbox_messages_failed_total", **sub) == 1
    assert value(series, "outbox_messages_retried_total", **sub) == 1
    assert value(series, "outbox_handler_duration_seconds_count", outcome="timed_out", **sub) == 1


def test_two_daemons_in_one_process_keep_separate_registries(database_url: str) -> None:
    subscribe(database_url, "first")
    subscribe(database_url, "second")
    append(database_url, 3)
    options = [with_port(), with_port()]
    ports = [o.metrics_port for o in options if o.metrics_port is not None]
    with (
        DaemonThread(database_url, ["first"], lambda _: None, options[0]),
        DaemonThread(database_url, ["second"], lambda _: None, options[1]),
    ):
        for port, name in zip(ports, ["first", "second"], strict=True):

            def delivered_three(series: Series, name: str = name) -> bool:
                return value(series, "outbox_messages_delivered_total", subscription=name) == 3

            series = scraped_when(port, delivered_three, f"{name} to deliver 3")
            subscriptions = {dict(labels).get("subscription") for _, labels in series}
            assert subscriptions == {name, None}, "a daemon reported another one's subscription"


def test_the_frontier_holder_age_is_at_least_an_open_transactions_age(database_url: str) -> None:
    subscribe(database_url)
    options = with_port()
    assert options.metrics_port is not None
    with (
        psycopg.connect(database_url) as holder,
        DaemonThread(database_url, ["sub"], lambda _: None, options),
    ):
        holder.execute("SELECT pg_current_xact_id()")  # takes an xid: the frontier stops here
        opened = time.monotonic()
        time.sleep(0.5)  # the age to observe
        held = time.monotonic() - opened
        # The holder is the oldest xid, ours or (on a shared server) an older one: got its xid
        # before ours did and still open, so it is at least as old as ours.
        age = value(scrape(options.metrics_port), "outbox_safe_frontier_holder_age_seconds")
        assert age is not None
        assert age >= held
        holder.rollback()


def _allow_connections(server: Any, name: str, allowed: bool) -> None:
    server.execute(
        sql.SQL("ALTER DATABASE {} WITH ALLOW_CONNECTIONS {}").format(
            sql.Identifier(name), sql.SQL("true" if allowed else "false")
        )
    )


def probe_status(port: int, path: str) -> int:
    return get(port, path)[0]


@pytest.mark.slow
def test_readyz_turns_not_ready_while_the_database_is_gone_and_ready_after(
    database_url: str, database_server: str
) -> None:
    subscribe(database_url)
    options = [with_port(), with_port()]
    ports = [o.metrics_port for o in options if o.metrics_port is not None]
    name = database_name(database_url)
    with (
        psycopg.connect(database_server, autocommit=True) as server,
        DaemonThread(database_url, ["sub"], lambda _: None, options[0]),
        DaemonThread(database_url, ["sub"], lambda _: None, options[1]),
    ):
        try:
            expected = [(200, "ready: sub: leader\n"), (200, "ready: sub: standby\n")]
            wait_until(
                lambda: sorted(get(port, "/readyz") for port in ports) == expected,
                30,
                "a leader and a standby, both ready",
            )
            # Still ready after the silence limit has passed since the lease was taken: the
            # leader's renewals count as database answers, not only its first acquisition.
            time.sleep(FAST.lease_seconds + FAST.standby_poll + 0.5)
            assert sorted(get(port, "/readyz") for port in ports) == expected

            _allow_connections(server, name, allowed=False)
            server.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s",
                (name,),
            )
            wait_until(
                lambda: all(probe_status(p, "/readyz") == 503 for p in ports),
                30,
                "both daemons not ready",
            )
            assert "no database answer" in get(ports[0], "/readyz")[1]
            assert all(probe_status(p, "/healthz") == 200 for p in ports)  # alive all along
            gone = scrape(ports[0])
            assert value(gone, "outbox_database_up") == 0
            assert value(gone, "outbox_leader", subscription="sub") == 0
        finally:
            _allow_connections(server, name, allowed=True)
        wait_until(
            lambda: all(probe_status(p, "/readyz") == 200 for p in ports),
            30,
            "both daemons ready again",
        )
        assert value(scrape(ports[0]), "outbox_database_up") == 1
