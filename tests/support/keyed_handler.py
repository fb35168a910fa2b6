"""A handler for the consumer-group tests: every delivery becomes a row of `deliveries`.

The daemon under test loads it with `--handler tests.support.keyed_handler:handle` (0 to 5 ms
of work) or `:handle_slowly` (50 ms). It is a sync handler, so the daemon runs several at once
on its thread pool. Each call inserts its row (pid, thread, key, position, transaction id,
attempt, started_at) BEFORE the work and sets finished_at and the outcome after it, each on
this thread's own autocommit connection to OUTBOX_DATABASE_URL: a row without finished_at is
a delivery whose process died under it. Times are the handler's `time.time()`, comparable
with the test's own clock; `recorded_at` is the database's clock_timestamp() when the start
row went in (between started_at and the work), comparable with other rows' database times.
The recorded interval lies inside the daemon's in-flight interval (the daemon delivered before
the handler started and learns the outcome after it returned), so two recorded intervals that
overlap prove two deliveries were in flight at once.

Failures are deterministic: `fails(position, attempt)` is a seeded hash, true for about 5 %
of (position, attempt) pairs, so a message fails on some attempts, not forever, and a test can
tell which messages must end up parked (every attempt up to max_retry_count fails).
"""

import hashlib
import os
import random
import threading
import time
from typing import Any, NamedTuple

import psycopg

from poller.message import Message
from tests.support.databases import probe
from tests.support.recording_handler import thread_connection as _connection

FAILURE_RATE = 0.05
SEED = "consumer-groups"
SLOW_SECONDS = 0.05

CREATE_TABLE = (
    "CREATE TABLE deliveries ("
    " id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,"
    " pid integer NOT NULL,"
    " thread text NOT NULL,"
    " partition_key text,"
    " position bigint NOT NULL,"
    " transaction_id bigint NOT NULL,"
    " delivery_attempt integer NOT NULL,"
    " started_at double precision NOT NULL,"
    " finished_at double precision,"
    " outcome text CHECK (outcome IN ('ack', 'fail')),"
    " recorded_at timestamptz NOT NULL DEFAULT clock_timestamp(),"
    # CLOCK_MONOTONIC is one clock for every process of this machine: these compare across
    # daemons exactly, where time.time() may step.
    " started_monotonic double precision,"
    " finished_monotonic double precision)"
)
START = (
    "INSERT INTO deliveries (pid, thread, partition_key, position, transaction_id,"
    " delivery_attempt, started_at, started_monotonic) VALUES (%s, %s, %s, %s, %s, %s, %s, %s)"
    " RETURNING id"
)
FINISH = (
    "UPDATE deliveries SET finished_at = %s, finished_monotonic = %s, outcome = %s WHERE id = %s"
)


class InjectedFailureError(Exception):
    """The 5 % of attempts this handler fails on purpose."""


class Delivery(NamedTuple):
    """One row of `deliveries`: one attempt in one process."""

    id: int
    pid: int
    thread: str
    partition_key: str | None
    position: int
    transaction_id: int
    delivery_attempt: int
    started_at: float
    finished_at: float | None
    outcome: str | None
    recorded_at: Any  # the database's clock when the start row went in
    # The same start and end on CLOCK_MONOTONIC: comparable across processes exactly.
    started_monotonic: float
    finished_monotonic: float | None

    @property
    def at(self) -> tuple[int, int]:
        """Delivery order: (transaction_id, position), as outbox.positions.Position."""
        return (self.transaction_id, self.position)


def fails(position: int, attempt: int) -> bool:
    """Whether attempt number `attempt` of the message at `position` fails (seeded, ~5 %)."""
    digest = hashlib.blake2b(f"{SEED}:{position}:{attempt}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") < FAILURE_RATE * 2**64


def create_deliveries_table(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(CREATE_TABLE)


def read_deliveries(url: str) -> list[Delivery]:
    """Every delivery recorded so far, in the order they were recorded."""
    rows = (
        probe(url)
        .execute(
            "SELECT id, pid, thread, partition_key, position, transaction_id, delivery_attempt,"
            " started_at, finished_at, outcome, recorded_at, started_monotonic,"
            " finished_monotonic FROM deliveries ORDER BY id"
        )
        .fetchall()
    )
    return [Delivery(*row) for row in rows]


def deliveries_by(url: str, pid: int) -> int:
    """How many deliveries process `pid` started."""
    row = probe(url).execute("SELECT count(*) FROM deliveries WHERE pid = %s", (pid,)).fetchone()
    assert row is not None
    return int(row[0])


def finished_positions(url: str, subscription: str) -> set[int]:
    """Positions acked at least once or parked."""
    rows = (
        probe(url)
        .execute(
            "SELECT position FROM deliveries WHERE outcome = 'ack' UNION"
            " SELECT position FROM outbox.parked_messages WHERE subscription_id = %s",
            (subscription,),
        )
        .fetchall()
    )
    return {row[0] for row in rows}


class Interval(NamedTuple):
    """When one delivery's handler ran, on the machine-wide monotonic clock."""

    partition_key: str | None
    pid: int
    position: int
    started: float
    finished: float | None


def handler_intervals(url: str) -> list[Interval]:
    rows = (
        probe(url)
        .execute(
            "SELECT partition_key, pid, position, started_monotonic, finished_monotonic"
            " FROM deliveries ORDER BY started_monotonic"
        )
        .fetchall()
    )
    return [Interval(*row) for row in rows]


def _handle(message: Message, work_seconds: float) -> None:
    started_at = time.time()
    started_monotonic = time.monotonic()
    conn = _connection()
    row = conn.execute(
        START,
        (
            os.getpid(),
            threading.current_thread().name,
            message.partition_key,
            message.position,
            message.transaction_id,
            message.delivery_attempt,
            started_at,
            started_monotonic,
        ),
    ).fetchone()
    assert row is not None
    time.sleep(work_seconds)
    failed = fails(message.position, message.delivery_attempt)
    conn.execute(FINISH, (time.time(), time.monotonic(), "fail" if failed else "ack", row[0]))
    if failed:
        raise InjectedFailureError(f"attempt {message.delivery_attempt} of {message.position}")


def handle(message: Message) -> None:
    """Record the delivery around 0 to 5 ms of work; fail ~5 % of attempts."""
    _handle(message, random.uniform(0.0, 0.005))


def handle_slowly(message: Message) -> None:
    """Like `handle` with 50 ms of work, so deliveries are in flight when a test acts."""
    _handle(message, SLOW_SECONDS)
