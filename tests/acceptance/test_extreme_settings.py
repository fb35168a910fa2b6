"""Allowed settings keep the daemon responsive: it delivers, moves its checkpoint, renews its
lease and answers SIGTERM. `subscription update` accepted values that froze it for minutes
(1024 consumers x 10,000 in flight made ten million idle slot tasks up front), and an async
handler that fails without awaiting anything held the event loop in one endless step."""

from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

import outbox
from poller.message import Message
from tests.support.cli import outbox_succeeds
from tests.support.daemons import (
    DaemonGroup,
    create_handled_table,
    daemon_group,
    handled_positions,
    wait_until,
)
from tests.support.databases import probe
from tests.support.stored import committed_messages, create_subscription, stored_checkpoint

EXTREMES = (
    *("--consumers", "1024", "--max-in-flight", "10000"),
    *("--buffer-size", "1000000", "--read-batch-size", "100000"),
    *("--checkpoint-after", "0", "--message-timeout", "0.001"),
)


@pytest.fixture
def daemons(database_url: str, tmp_path: Path) -> Iterator[DaemonGroup]:
    create_handled_table(database_url)
    with daemon_group(database_url, tmp_path) as group:
        yield group


def test_the_extreme_allowed_settings_keep_the_daemon_delivering_and_answering(
    database_url: str, daemons: DaemonGroup
) -> None:
    create_subscription(database_url, "billing", "orders")
    outbox_succeeds(database_url, "subscription", "update", "billing", *EXTREMES)
    with psycopg.connect(database_url) as conn:  # one transaction: every consumer gets some
        for n in range(2048):
            outbox.append(conn, "orders", "OrderPlaced", {"n": n})
    committed = committed_messages(database_url, "orders")
    daemon = daemons.start("billing", "--lease-seconds", "1")

    wait_until(
        lambda: handled_positions(database_url) >= {m.at.position for m in committed},
        30,
        "every message delivered",
    )
    wait_until(
        lambda: stored_checkpoint(database_url, "billing") == committed[-1].at,
        30,
        "the checkpoint past the last message",
    )
    assert daemon.terminate(timeout=10) == 0, daemons.logs()
    assert not daemon.errors(), daemons.logs()


async def fail_at_once(_message: Message) -> None:
    """An async handler that fails before its first await."""
    raise RuntimeError("refused")


def retry_queue(url: str, subscription: str) -> int:
    query = "SELECT retry_queue FROM outbox.subscription_status WHERE subscription_id = %s"
    row = probe(url).execute(query, (subscription,)).fetchone()
    return 0 if row is None or row[0] is None else int(row[0])


def test_an_async_handler_failing_at_once_leaves_the_loop_to_leases_and_sigterm(
    database_url: str, daemons: DaemonGroup
) -> None:
    # Two slots: not the strictly ordered single slot, so a failure withdraws the run's rest
    # and its redelivery runs at once, without an await in between.
    create_subscription(database_url, "billing", "orders", max_in_flight=2, max_retry_count=1000)
    with psycopg.connect(database_url) as conn:
        for n in range(1000):
            outbox.append(conn, "orders", "OrderPlaced", {"n": n})
    daemon = daemons.start(
        "billing",
        *("--lease-seconds", "1", "--shutdown-timeout", "1"),
        handler=f"{__name__}:fail_at_once",
    )
    # The runtime figures go out with lease renewals: retries in them mean the loop renews.
    wait_until(lambda: retry_queue(database_url, "billing") > 0, 30, "retries in the status")
    assert daemon.terminate(timeout=10) == 0, daemons.logs()
