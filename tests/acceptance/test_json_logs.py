"""`outbox poll --log-format json`: every line a JSON object, labelled with the subscription,
the leader's token and, where the record is about one, the position and message id."""

import json
from pathlib import Path
from typing import Any

import psycopg

import outbox
from tests.support.daemons import create_handled_table, daemon_group, handled_rows, wait_until
from tests.support.stored import create_subscription

HOSTILE_HANDLER = "tests.support.recording_handler:record_unless_hostile"


def json_lines(text: str) -> list[dict[str, Any]]:
    """Each line of the log as JSON; fails on the first that is not."""
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def test_every_line_is_json_with_the_subscription_token_position_and_message_id(
    database_url: str, tmp_path: Path
) -> None:
    create_handled_table(database_url)
    create_subscription(database_url, "billing", "orders", max_retry_count=1)
    with psycopg.connect(database_url) as conn:
        outbox.append(conn, "orders", "OrderPlaced", {"n": 1}, message_id="fine-1")
        parked_at = outbox.append(conn, "orders", "RaisesNul", {"n": 2}, message_id="bad-2")
    with daemon_group(database_url, tmp_path) as daemons:
        daemon = daemons.start("billing", "--log-format", "json", handler=HOSTILE_HANDLER)
        daemon.wait_for_log(r'"message_id": "bad-2"', 30)
        wait_until(lambda: handled_rows(database_url), 30, "the good message")
        assert daemon.terminate() == 0, daemon.log()
        records = json_lines(daemon.log())

    assert {"time", "level", "logger", "message"} <= set(records[0])
    leading = next(r for r in records if r["message"].startswith("leading billing"))
    assert leading["subscription"] == "billing"
    assert isinstance(leading["leader_token"], int)
    assert (leading["position"], leading["epoch"]) == ("0:0", 0)
    parked = next(r for r in records if "parked" in r["message"])
    assert parked["level"] == "WARNING"
    assert parked["message_id"] == "bad-2"
    assert parked["position"].endswith(f":{parked_at}")
    assert parked["leader_token"] == leading["leader_token"]
    stopped = next(r for r in records if r["message"].startswith("stopped billing"))
    assert stopped["subscription"] == "billing"
