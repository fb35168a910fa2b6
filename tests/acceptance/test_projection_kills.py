"""The example projection (examples/projection_counts.py) under SIGKILL: killed at random
several times and restarted while 16 writers commit out of order, its counts end equal to the
committed messages, not one lost, not one counted twice."""

import random
import re
import signal
import subprocess
import sys
import time
from typing import Any

import psycopg
import pytest

from outbox_cli.demo.workload import WorkloadShape
from tests.support.cli import outbox_environment
from tests.support.databases import PROJECT_ROOT
from tests.support.documentation import page
from tests.support.writers import KeyedWriter, WorkloadLoop

PUBLICATION = "orders"
EXAMPLE = PROJECT_ROOT / "examples" / "projection_counts.py"
CATCH_UP = page("how-to/catch-up.md")
KILLS = 6


def start_projection(url: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, str(EXAMPLE), PUBLICATION],
        env=outbox_environment(
            url,
            # Checkpoints often, so kills land between commits of counts and positions.
            OUTBOX_CHECKPOINT_INTERVAL="5",
            OUTBOX_CHECKPOINT_TIMEOUT_SECS="0.05",
        ),
        cwd=PROJECT_ROOT,
        stdin=subprocess.DEVNULL,
    )


def counts(conn: psycopg.Connection[Any]) -> dict[str, int]:
    if conn.execute("SELECT to_regclass('message_type_counts')").fetchone() == (None,):
        return {}
    return dict(conn.execute("SELECT message_type, count FROM message_type_counts").fetchall())


def stored_position(conn: psycopg.Connection[Any]) -> tuple[int, int] | None:
    row = conn.execute(
        "SELECT transaction_id::text::bigint, position FROM outbox.consumer_positions"
    ).fetchone()
    return None if row is None else (row[0], row[1])


def wait_for_progress(conn: psycopg.Connection[Any], since: tuple[int, int] | None) -> None:
    deadline = time.monotonic() + 60
    while stored_position(conn) == since:
        assert time.monotonic() < deadline, "the projection stored no position for 60 s"
        time.sleep(0.02)


@pytest.mark.slow
def test_the_projection_killed_at_random_counts_every_committed_message_once(
    database_url: str,
) -> None:
    rng = random.Random(12)
    shape = WorkloadShape(writers=16, transactions_per_writer=10, max_commit_delay=0.02, seed=3)
    with psycopg.connect(database_url, autocommit=True) as conn:
        projection = start_projection(database_url)
        try:
            with (
                WorkloadLoop(database_url, PUBLICATION, shape) as out_of_order,
                KeyedWriter(
                    database_url, PUBLICATION, keys=5, cap=10_000, interval=0.002, seed=4
                ) as keyed,
            ):
                for _ in range(KILLS):
                    # Killed at a random moment after it made progress, so every restart
                    # resumes from a position it stored, mid-stream.
                    wait_for_progress(conn, stored_position(conn))
                    time.sleep(rng.uniform(0, 0.3))
                    projection.send_signal(signal.SIGKILL)
                    projection.wait()
                    projection = start_projection(database_url)
                written = [out_of_order.stop(), keyed.stop()]
            committed = set().union(*(w.committed_snapshot() for w in written))
            expected: dict[str, int] = dict(
                conn.execute(
                    "SELECT message_type, count(*) FROM outbox.messages GROUP BY message_type"
                ).fetchall()
            )
            in_outbox = conn.execute("SELECT position FROM outbox.messages").fetchall()
            assert {position for (position,) in in_outbox} == committed
            assert set(expected) == {"DemoEvent", "KeyedEvent"}
            deadline = time.monotonic() + 20
            while counts(conn) != expected and time.monotonic() < deadline:
                time.sleep(0.1)
        finally:
            projection.send_signal(signal.SIGKILL)
            projection.wait()
        assert counts(conn) == expected


def test_the_readme_shows_the_example_projection() -> None:
    blocks = re.findall(r"```python\n(.*?)```", CATCH_UP.read_text(), re.S)
    shown = [block for block in blocks if "def project_counts" in block]
    assert len(shown) == 1
    body = shown[0][shown[0].index("def project_counts") :]
    assert body in EXAMPLE.read_text()
