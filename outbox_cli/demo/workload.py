"""Concurrent writers whose transactions commit in random order, and readers racing them.

Each writer takes its positions (identity values) when it inserts, then sleeps a random while
before committing or rolling back, so commits land out of position order, exactly the hazard
in which a `position > last` reader skips a row that commits late.
"""

import random
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import psycopg

import outbox
from outbox.positions import START, Position
from outbox.queries import load_queries
from poller import operations
from poller.message import Message

DEMO_QUERIES = load_queries("demo_queries.sql")


@dataclass
class WriterTally:
    committed: set[int] = field(default_factory=set)
    rolled_back: set[int] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)


@dataclass(frozen=True)
class WorkloadShape:
    writers: int = 16
    transactions_per_writer: int = 25
    max_messages_per_transaction: int = 3
    max_commit_delay: float = 0.02
    rollback_ratio: float = 0.15
    seed: int = 7


def run_writers(database_url: str, publication: str, shape: WorkloadShape) -> WriterTally:
    """Run the writers to completion and return what each transaction did."""
    tally = WriterTally()
    threads = [
        threading.Thread(
            target=_write, args=(database_url, publication, shape, shape.seed * 1000 + n, tally)
        )
        for n in range(shape.writers)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return tally


def _write(
    database_url: str, publication: str, shape: WorkloadShape, seed: int, tally: WriterTally
) -> None:
    rng = random.Random(seed)
    with psycopg.connect(database_url) as conn:
        for _ in range(shape.transactions_per_writer):
            positions: list[int] = []
            with conn.transaction() as transaction:
                for _ in range(rng.randint(1, shape.max_messages_per_transaction)):
                    positions.append(
                        outbox.append(
                            conn,
                            publication,
                            "DemoEvent",
                            {"writer": seed, "n": len(positions)},
                            partition_key=f"key-{rng.randint(0, 9)}",
                        )
                    )
                time.sleep(rng.uniform(0, shape.max_commit_delay))
                rolled_back = rng.random() < shape.rollback_ratio
                if rolled_back:
                    raise_rollback(transaction)
            with tally.lock:
                (tally.rolled_back if rolled_back else tally.committed).update(positions)


def raise_rollback(transaction: psycopg.Transaction) -> None:
    raise psycopg.Rollback(transaction)


def read_batch_naive(
    conn: psycopg.Connection[Any], publication: str, after_position: int, limit: int
) -> list[Message]:
    """`position > last`: loses rows whose transaction commits after a later one."""
    rows = conn.execute(
        DEMO_QUERIES["read_batch_naive"],
        {"publication": publication, "after_position": after_position, "limit": limit},
    ).fetchall()
    return [Message.from_row(row) for row in rows]


@dataclass
class ReaderTally:
    positions: list[int] = field(default_factory=list)
    order: list[Position] = field(default_factory=list)


def read_until(
    database_url: str, publication: str, writers_done: threading.Event, *, naive: bool
) -> ReaderTally:
    """Page through the publication until the writers are done and nothing is left.

    The safe reader keeps a (transaction_id, position) checkpoint; the naive one keeps the
    highest position it has seen, as a home-made poller would.
    """
    tally = ReaderTally()
    checkpoint = START
    last_position = 0
    with psycopg.connect(database_url, autocommit=True) as conn:
        while True:
            finished = writers_done.is_set()
            if naive:
                batch = read_batch_naive(conn, publication, last_position, 100)
            else:
                batch = operations.read_messages(conn, publication, checkpoint, 100)
            for message in batch:
                tally.positions.append(message.position)
                tally.order.append(message.at)
            if batch:
                checkpoint = batch[-1].at
                last_position = max(last_position, max(m.position for m in batch))
            elif finished:
                return tally
            else:
                time.sleep(0.001)
