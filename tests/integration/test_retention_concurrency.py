"""Writers append, a reader delivers and checkpoints, and retention runs, all at once: every
committed message is delivered once, none is retired before, and no writer ever fails."""

import random
import threading
import time
from typing import Any

import psycopg

import outbox
from outbox import NewMessage
from outbox.queries import QUERIES
from poller.daemon.options import DaemonOptions
from poller.retention import retention_pass
from tests.support.partitions import use_small_partitions

SIZE = 150
OPTIONS = DaemonOptions(
    retention_minimum_age=0.001, partition_size=SIZE, partitions_ahead=4, retention_lock_wait=0.2
)
WRITERS = 3
TRANSACTIONS_PER_WRITER = 80


class Run:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.committed: set[int] = set()
        self.delivered: list[int] = []
        self.retired: list[str] = []
        self.errors: list[BaseException] = []
        self.writers_done = threading.Event()
        self.reader_done = threading.Event()


def _write(url: str, run: Run, seed: int) -> None:
    chance = random.Random(seed)
    with psycopg.connect(url) as conn:
        for _ in range(TRANSACTIONS_PER_WRITER):
            batch = [NewMessage("T", {}) for _ in range(chance.randint(1, 6))]
            written = outbox.append_many(conn, "orders", batch)
            # Held open a moment: rows in flight, committed out of position order, some of
            # them in a partition that retention is looking at.
            time.sleep(chance.random() * 0.02)
            if chance.random() < 0.1:
                conn.rollback()
            else:
                conn.commit()
                with run.lock:
                    run.committed.update(written)


def _read(url: str, run: Run) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        after = ("0", 0)
        while True:
            writers_finished = run.writers_done.is_set()
            rows = conn.execute(
                QUERIES["read_batch"],
                {
                    "publication": "orders",
                    "after_transaction_id": after[0],
                    "after_position": after[1],
                    "limit": 50,
                },
            ).fetchall()
            if not rows and writers_finished:
                return
            for row in rows:
                run.delivered.append(row[0])
                after = (str(row[1]), row[0])
            # Checkpoint what was delivered, as a leader would.
            conn.execute(
                "UPDATE outbox.subscriptions SET last_processed_transaction_id = %s::text::xid8,"
                " last_processed_position = %s WHERE subscription_id = 'billing'",
                after,
            )
            time.sleep(0.005)


def _prune(url: str, run: Run) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        while not run.reader_done.is_set():
            done = retention_pass(conn, OPTIONS)
            run.retired += [r.partition.name for r in done.retired if r.outcome == "retired"]
            time.sleep(0.01)


def _guarded(target: Any, run: Run, *arguments: Any) -> threading.Thread:
    def body() -> None:
        try:
            target(*arguments)
        except BaseException as error:  # reported by the test
            run.errors.append(error)

    thread = threading.Thread(target=body)
    thread.start()
    return thread


def test_writers_lose_nothing_while_retention_retires_partitions(database_url: str) -> None:
    use_small_partitions(database_url, SIZE, ahead=4)
    with psycopg.connect(database_url) as conn:
        conn.execute(
            "INSERT INTO outbox.subscriptions (subscription_id, publication_id)"
            " VALUES ('billing', 'orders')"
        )
    run = Run()
    writers = [_guarded(_write, run, database_url, run, seed) for seed in range(WRITERS)]
    reader = _guarded(_read, run, database_url, run)
    pruner = _guarded(_prune, run, database_url, run)
    for writer in writers:
        writer.join(120)
    run.writers_done.set()
    reader.join(120)
    run.reader_done.set()
    pruner.join(120)
    assert run.errors == []
    assert sorted(run.delivered) == sorted(run.committed)
    assert len(run.delivered) == len(set(run.delivered))
    assert len(run.retired) >= 2, run.retired  # retention did run while the writers wrote
