"""`outbox status` as an operator reads it: messages retrying and parked (the oldest named),
the leader of each shard, a Spark query shown as one rather than as a stuck consumer, and a
process leading several shards naming the shard in its log lines."""

import json
import logging
import re
import threading
from typing import Any

import psycopg

import outbox
from outbox.positions import Position
from outbox.shards import message_shard
from outbox_cli.log_format import JsonLogFormatter, TextLogFormatter
from poller import operations
from poller.daemon.log_context import LogContextFilter
from poller.handler_requests import ParkMessage
from poller.message import Message
from tests.integration.test_daemon import wait_for
from tests.integration.test_shard_administration import lead
from tests.support.cli import outbox_succeeds
from tests.support.inprocess import running_daemon


def status(url: str) -> dict[str, dict[str, Any]]:
    return {
        row["subscription"]: row for row in json.loads(outbox_succeeds(url, "status", "--json"))
    }


def test_status_counts_retrying_and_parked_messages_and_names_the_oldest_parked(
    database_url: str,
) -> None:
    with psycopg.connect(database_url) as conn:
        settings = {"retry_backoff_initial": 600.0, "retry_backoff_max": 600.0}
        settings |= {"consumers": 2, "checkpoint_after": 0.05}
        operations.create(conn, "billing", "orders", "start", settings)
        parked = outbox.append(conn, "orders", "Park", {})
        retried = outbox.append(conn, "orders", "Retry", {})
        row = conn.execute("SELECT pg_current_xact_id()::text::bigint").fetchone()
    assert row is not None
    failed_once = threading.Event()

    def handle(message: Message) -> None:
        if message.message_type == "Park":
            raise ParkMessage("bad data")
        failed_once.set()
        raise RuntimeError("downstream is down")  # backs off for ten minutes

    with running_daemon(database_url, ["billing"], handle):
        assert failed_once.wait(15)
        wait_for(lambda: status(database_url)["billing"]["retrying"] == 1)
        billing = status(database_url)["billing"]
        text = outbox_succeeds(database_url, "status")
    assert billing["parked_messages"] == 1
    assert billing["oldest_parked"] == str(Position(row[0], parked))
    assert billing["oldest_parked_position"] == parked
    assert billing["oldest_parked_age_seconds"] >= 0
    assert (billing["kind"], billing["last_batch_at"]) == ("subscription", None)
    (line,) = [line for line in text.splitlines() if line.startswith("│ billing")]
    cells = [cell.strip() for cell in line.strip("│").split("│")]
    assert cells[7] == "1"  # retrying
    assert re.fullmatch(rf"1 \(oldest {row[0]}:{parked}, \d+ s ago\)", cells[8])
    assert retried != parked


def test_status_names_the_leader_of_each_shard(database_url: str) -> None:
    with psycopg.connect(database_url) as conn:
        operations.create(conn, "plain", "orders", "start", {})
        operations.create(conn, "sharded", "orders", "start", {}, shards=3)
        lead(conn, "sharded", 3, 0, alive=True)
        lead(conn, "sharded", 3, 2, alive=False)
    sharded = status(database_url)["sharded"]
    assert [
        (s["shard"], s["shard_count"], s["leader_alive"], s["leader_pid"])
        for s in sharded["shard_leaders"]
    ] == [(0, 3, True, 4242), (1, 3, False, None), (2, 3, False, 4242)]
    text = outbox_succeeds(database_url, "status")
    shards_table = text[text.index("┃ subscription ┃ shard") :]
    assert re.search(
        r"│ sharded\s+│ 0/3\s+│ worker-host pid 4242 since [\d:]+\s+│ yes", shards_table
    )
    assert re.search(r"│ sharded\s+│ 1/3\s+│ none\s+│ no", shards_table)
    assert re.search(
        r"│ sharded\s+│ 2/3\s+│ worker-host pid 4242 since [\d:]+ \(lease expired\)", text
    )
    assert "│ plain " not in shards_table  # its one shard is the leader column already


def test_a_spark_query_shows_its_last_batch_not_a_lag(database_url: str) -> None:
    with psycopg.connect(database_url) as conn:
        outbox.append(conn, "orders", "OrderPlaced", {})
        conn.execute(
            "INSERT INTO outbox.subscriptions"
            " (subscription_id, publication_id, settings, updated_at)"
            " VALUES ('lake', 'orders', %s, '2026-01-02T03:04:05Z')",
            ('{"kind": "spark"}',),
        )
    lake = status(database_url)["lake"]
    assert (lake["kind"], lake["last_batch_at"]) == ("spark", "2026-01-02T03:04:05+00:00")
    assert lake["messages_behind"] == 1  # scripts keep the figure
    text = outbox_succeeds(database_url, "status")
    (line,) = [line for line in text.splitlines() if line.startswith("│ lake")]
    cells = [cell.strip() for cell in line.strip("│").split("│")]
    assert cells[3:5] == ["-", "-"]
    assert cells[5] == "Spark query, last batch 2026-01-02 03:04:05+0000"


class Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.addFilter(LogContextFilter())
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def test_a_process_leading_several_shards_names_the_shard_in_each_log_line(
    database_url: str,
) -> None:
    with psycopg.connect(database_url) as conn:
        operations.create(conn, "billing", "orders", "start", {}, shards=2)
        keys = {message_shard(f"k-{n}", 0, 2): f"k-{n}" for n in range(10)}
        positions = {
            outbox.append(conn, "orders", "T", {}, partition_key=keys[shard]): shard
            for shard in (0, 1)
        }

    def park(_message: Message) -> None:
        raise ParkMessage("bad data")

    records = Records()
    logger = logging.getLogger("poller")
    logger.addHandler(records)
    logger.setLevel(logging.INFO)
    try:
        with running_daemon(database_url, ["billing"], park):

            def parks() -> list[logging.LogRecord]:
                return [r for r in records.records if "parked" in r.getMessage()]

            wait_for(lambda: len(parks()) == 2)
    finally:
        logger.removeHandler(records)
        logger.setLevel(logging.NOTSET)
    for record in parks():
        # The fields the daemon logs as `extra`, set on the record itself.
        shard = positions[int(record.__dict__["position"].split(":")[1])]
        assert record.__dict__["shard"] == f"{shard}/2"
        assert (
            f" poller.daemon.term.term_writes [shard {shard}/2]: subscription billing parked"
            in (TextLogFormatter().format(record))
        )
        assert json.loads(JsonLogFormatter().format(record))["shard"] == f"{shard}/2"
