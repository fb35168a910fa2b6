"""Waiting until what was written counts as backlog for a new subscription.

A subscription's backlog is what lies below the safe frontier when it subscribes. Any
transaction open elsewhere on a shared test server (another test's) holds the frontier back,
and a row above it counts as live; a test that asserts on the order of backlog, CaughtUp and
live events first waits for the frontier to pass every row written.
"""

import psycopg

from tests.support.daemons import wait_until


def wait_until_all_rows_are_backlog(url: str, timeout: float = 60) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        wait_until(
            lambda: (
                conn.execute(
                    "SELECT pg_snapshot_xmin(pg_current_snapshot())"
                    " > (SELECT max(transaction_id) FROM outbox.messages)"
                ).fetchone()
                == (True,)
            ),
            timeout=timeout,
            what="the safe frontier to pass every message written",
        )
