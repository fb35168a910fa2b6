"""A handler that holds messages until the test opens their gate: `gated_handler:handle`.

Each call records its start in `gated` (position, key, started_monotonic), then, for a message
whose data says `"hold": true`, waits until the test inserts its position into `gate_open`,
then records its finish. Times are CLOCK_MONOTONIC, one clock for every process of the
machine, so a test compares them with its own and with other rows exactly. The test creates
the tables with `create_gate_tables`.
"""

import time
from typing import Any

import psycopg

from poller.message import Message
from tests.support.databases import probe
from tests.support.recording_handler import thread_connection

# A held handler gives up after this long, so a failed test does not leave threads behind.
HOLD_LIMIT_SECONDS = 60.0


def create_gate_tables(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE gated (id bigint GENERATED ALWAYS AS IDENTITY, position bigint NOT NULL,"
            " partition_key text, started_monotonic double precision NOT NULL,"
            " finished_monotonic double precision)"
        )
        conn.execute("CREATE TABLE gate_open (position bigint PRIMARY KEY)")


def open_gate(url: str, position: int) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("INSERT INTO gate_open VALUES (%s)", (position,))


def gated_rows(url: str) -> dict[int, list[tuple[float, float | None]]]:
    """(started, finished) of every delivery, by position."""
    rows = probe(url).execute(
        "SELECT position, started_monotonic, finished_monotonic FROM gated ORDER BY 2"
    )
    found: dict[int, list[tuple[float, float | None]]] = {}
    for position, started, finished in rows.fetchall():
        found.setdefault(position, []).append((started, finished))
    return found


def handle(message: Message) -> None:
    conn = thread_connection()
    row = conn.execute(
        "INSERT INTO gated (position, partition_key, started_monotonic) VALUES (%s, %s, %s)"
        " RETURNING id",
        (message.position, message.partition_key, time.monotonic()),
    ).fetchone()
    assert row is not None
    data: Any = message.data
    if isinstance(data, dict) and data.get("hold"):
        deadline = time.monotonic() + HOLD_LIMIT_SECONDS
        query = "SELECT 1 FROM gate_open WHERE position = %s"
        while conn.execute(query, (message.position,)).fetchone() is None:
            if time.monotonic() > deadline:
                raise TimeoutError(f"gate of {message.position} never opened")
            time.sleep(0.02)
    conn.execute(
        "UPDATE gated SET finished_monotonic = %s WHERE id = %s", (time.monotonic(), row[0])
    )
