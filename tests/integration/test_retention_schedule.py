"""The daemon's retention task runs on its interval, and only while no other process holds the
retention lock (so one daemon of a database retires partitions at a time)."""

import asyncio
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg

import outbox
from outbox import NewMessage
from outbox.queries import QUERIES
from poller.daemon.options import DaemonOptions
from poller.daemon.process.retention import run_retention
from tests.support.partitions import move_checkpoint, partition_names, use_small_partitions

OPTIONS = DaemonOptions(retention_interval=0.05, retention_minimum_age=0.001, partition_size=100)


@contextmanager
def retention_task(url: str) -> Iterator[None]:
    loop = asyncio.new_event_loop()
    stop = asyncio.Event()
    thread = threading.Thread(
        target=loop.run_until_complete, args=(run_retention(url, OPTIONS, stop),)
    )
    thread.start()
    try:
        yield
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(10)
        loop.close()


def _first_partition(conn: psycopg.Connection[Any]) -> str:
    return partition_names(conn)[0]


def _wait_for(condition: Any, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return False


def test_the_task_retires_on_schedule_only_while_it_holds_the_lock(database_url: str) -> None:
    use_small_partitions(database_url, 100)
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO outbox.subscriptions (subscription_id, publication_id)"
            " VALUES ('billing', 'orders')"
        )
        with conn.transaction():
            outbox.append_many(conn, "orders", [NewMessage("T", {}) for _ in range(150)])
        move_checkpoint(conn, "billing", 150)
        with psycopg.connect(database_url, autocommit=True) as other_daemon:
            assert other_daemon.execute(QUERIES["try_retention_lock"]).fetchone() == (True,)
            with retention_task(database_url):
                # Many intervals pass; the holder of the lock is the one that may retire.
                assert not _wait_for(lambda: _first_partition(conn) != "messages_from_0", 1.0)
                other_daemon.execute(QUERIES["release_retention_lock"])
                assert _wait_for(lambda: _first_partition(conn) == "messages_from_100", 10)
                # It also keeps partitions ahead of the writers.
                with conn.transaction():
                    outbox.append_many(conn, "orders", [NewMessage("T", {}) for _ in range(200)])
                assert _wait_for(lambda: partition_names(conn)[-1] == "messages_from_500", 10)
