"""The figures the alert rules (deploy/prometheus/) read beyond the daemon's first ones: the
transaction that blocks a delivery, named; what holds retention back, and since when; the
leadership terms a process started. Scraped as Prometheus does, on a real database."""

import asyncio
import dataclasses
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from outbox.roles import role_names
from poller import operations
from poller.daemon.background import DaemonThread
from poller.daemon.reporting.metrics_collector import BLOCKER_MINIMUM_AGE_SECONDS
from tests.integration.test_daemon import append, subscribe
from tests.integration.test_daemon_metrics import scraped_when, with_port
from tests.integration.test_shard_metrics import scraped
from tests.support.daemons import wait_until
from tests.support.databases import database_name
from tests.support.metrics_scrape import Series, value
from tests.support.partitions import (
    billing_over_three_partitions,
    move_checkpoint,
    use_small_partitions,
)
from tests.support.role_logins import login_as

BLOCKING = "outbox_blocking_transaction_age_seconds"
HELD = "outbox_retention_held_seconds"
TERMS = "outbox_leadership_terms_total"


def collected(database_url: str, subscriptions: list[str]) -> Series:
    """What a daemon of `subscriptions` would serve now (its collector, no daemon running)."""
    return asyncio.run(scraped(database_url, subscriptions))


def blockers(series: Series, subscription: str) -> dict[str, dict[str, str]]:
    """The blocking transactions named for `subscription`, by pid (the labels and the age)."""
    named = {}
    for (name, labels), age in series.items():
        label = dict(labels)
        if name == BLOCKING and label["subscription"] == subscription:
            named[label["pid"]] = label | {"age": str(age)}
    return named


def held(series: Series) -> dict[str, tuple[str, float]]:
    """The holders of retention, by kind: (holder, seconds held)."""
    return {
        dict(labels)["kind"]: (dict(labels)["holder"], seconds)
        for (name, labels), seconds in series.items()
        if name == HELD
    }


@pytest.fixture
def held_open(database_url: str) -> Iterator[psycopg.Connection[Any]]:
    """A session with a transaction that holds an xid, as an idle-in-transaction one would."""
    with psycopg.connect(database_url, application_name="forgot-to-commit") as conn:
        conn.execute("SELECT pg_current_xact_id()")
        yield conn


def test_a_transaction_holding_back_committed_messages_is_named_until_it_ends(
    database_url: str, held_open: psycopg.Connection[Any]
) -> None:
    subscribe(database_url)
    opened = time.monotonic()
    append(database_url, 2)  # committed after the held transaction took its xid: hidden
    with psycopg.connect(database_url) as later:
        later.execute("SELECT pg_current_xact_id()")  # newer than the messages: holds none back
        later_opened = time.monotonic()
        early = collected(database_url, ["sub"])
        assert value(early, "outbox_blocked_messages", subscription="sub") == 2
        for blocker in blockers(early, "sub").values():  # only those open long enough
            assert float(blocker["age"]) >= BLOCKER_MINIMUM_AGE_SECONDS

        def named() -> Series | None:
            """Once the later transaction too is old enough to be shown, were it a blocker."""
            old_enough = time.monotonic() - later_opened > BLOCKER_MINIMUM_AGE_SECONDS + 0.5
            series = collected(database_url, ["sub"])
            shown = str(held_open.info.backend_pid) in blockers(series, "sub")
            return series if shown and old_enough else None

        series = wait_until(named, 30, "the held transaction named")
        ours = blockers(series, "sub")[str(held_open.info.backend_pid)]
        assert ours["kind"] == "session"
        assert ours["application"] == "forgot-to-commit"
        assert ours["user"] == held_open.info.user
        assert ours["database"] == database_name(database_url)
        assert float(ours["age"]) >= BLOCKER_MINIMUM_AGE_SECONDS
        assert float(ours["age"]) <= time.monotonic() - opened + 1
        assert str(later.info.backend_pid) not in blockers(series, "sub")
        assert value(series, "outbox_blocked_messages", subscription="sub") == 2

    held_open.rollback()

    def unblocked() -> Series | None:
        series = collected(database_url, ["sub"])
        return series if value(series, "outbox_blocked_messages", subscription="sub") == 0 else None

    ended = wait_until(unblocked, 30, "the messages visible once the transaction ended")
    assert str(held_open.info.backend_pid) not in blockers(ended, "sub")


def test_retention_names_the_oldest_holder_of_each_kind_and_how_long_it_held(
    database_url: str,
) -> None:
    # Positions 1 to 250 in partitions of 100; 'billing' has passed none of them.
    with billing_over_three_partitions(database_url, 100) as conn:
        first = collected(database_url, ["billing"])
        assert held(first).keys() == {"subscription"}
        holder, seconds = held(first)["subscription"]
        assert holder == "billing"
        assert seconds > 0

        # Past the first partition but for a parked message in it: it holds that partition,
        # 'billing' the next one.
        move_checkpoint(conn, "billing", 150)
        conn.execute(
            "INSERT INTO outbox.parked_messages"
            " (subscription_id, position, transaction_id, attempts, last_error)"
            " SELECT 'billing', position, transaction_id, 10, 'boom' FROM outbox.messages"
            " WHERE position = 42"
        )
        parked = held(collected(database_url, ["billing"]))
        assert parked.keys() == {"subscription", "parked"}
        assert parked["parked"][0] == "billing"

        # A subscription no daemon runs holds retention: every daemon names it.
        operations.create(conn, "forgotten", "orders", "start", {})
        forgotten = held(collected(database_url, ["billing"]))
        assert forgotten["subscription"][0] == "forgotten"

        operations.delete(conn, "forgotten")
        move_checkpoint(conn, "billing", 250)
        conn.execute("DELETE FROM outbox.parked_messages")
        assert held(collected(database_url, ["billing"])) == {}


def test_each_leadership_term_started_is_counted_by_shard(database_url: str) -> None:
    subscribe(database_url, "plain")
    with psycopg.connect(database_url) as conn:
        operations.create(conn, "sharded", "orders", "start", {}, shards=2)
    options = with_port()
    port = options.metrics_port
    assert port is not None
    with DaemonThread(database_url, ["plain", "sharded"], lambda _: None, options):
        first = scraped_when(
            port,
            lambda s: (
                value(s, TERMS, subscription="plain", shard="0/1") == 1
                and value(s, TERMS, subscription="sharded", shard="0/2") == 1
                and value(s, TERMS, subscription="sharded", shard="1/2") == 1
            ),
            "a term of each shard",
        )
        assert {dict(labels)["shard"] for name, labels in first if name == TERMS} == {
            "0/1",
            "0/2",
            "1/2",
        }
        # A settings change restarts each shard's term (lost sessions need not: a term whose
        # lease is still its own goes on over new connections).
        with psycopg.connect(database_url) as conn:
            operations.update_settings(conn, "plain", {"max_retry_count": 4})
            operations.update_settings(conn, "sharded", {"max_retry_count": 4})
        scraped_when(
            port,
            lambda s: (
                value(s, TERMS, subscription="plain", shard="0/1") == 2
                and value(s, TERMS, subscription="sharded", shard="0/2") == 2
                and value(s, TERMS, subscription="sharded", shard="1/2") == 2
            ),
            "a second term of each",
        )


def test_the_poller_role_reads_every_figure(database_url: str) -> None:
    """The daemon's metrics run as its own login: a statement it may not run would leave every
    database figure out (outbox_database_up 0)."""
    subscribe(database_url)
    with psycopg.connect(database_url) as conn:
        operations.create(conn, "idle", "orders", "start", {})  # holds retention
    use_small_partitions(database_url, 10)
    append(database_url, 12)
    options = dataclasses.replace(with_port(), retention_interval=3600)
    port = options.metrics_port
    assert port is not None
    with (
        login_as(database_url, role_names().poller) as poller_url,
        DaemonThread(poller_url, ["sub"], lambda _: None, options),
    ):
        series = scraped_when(
            port,
            lambda s: value(s, "outbox_lag_messages", subscription="sub") == 0,
            "the daemon, as the poller, to deliver all",
        )
        assert value(series, "outbox_database_up") == 1
        assert value(series, "outbox_blocked_messages", subscription="sub") == 0
        assert held(series)["subscription"][0] == "idle"
        assert value(series, TERMS, subscription="sub", shard="0/1") == 1
