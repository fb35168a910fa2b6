"""Retention: N messages in and out (5 million by default, a busy service's day compressed),
partition retention against DELETE-based retention in the same run; and the latency writers
see while partitions are created ahead of them.

OUTBOX_BENCH_RETENTION_MESSAGES sets N (a quick run uses 20,000).
"""

import functools
import json
import os
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg import sql

import outbox
from bench.common import Measurement
from poller.daemon.options import DaemonOptions
from poller.retention import retention_pass

TITLE = "Retention: partitions retired vs rows DELETEd; append latency while partitions are made"
ROUNDS = 20
BATCH = 1000
PAYLOAD = {"order": 42, "pad": "x" * 150}

# The unpartitioned outbox table of migration 0004, for the DELETE-based baseline.
DELETE_TABLE = """
CREATE TABLE bench_unpartitioned (
    position bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    transaction_id xid8 NOT NULL DEFAULT pg_current_xact_id(),
    publication_id text NOT NULL,
    message_id text NOT NULL,
    message_type text NOT NULL,
    partition_key text NULL,
    data jsonb NOT NULL,
    headers jsonb NOT NULL DEFAULT '{}',
    appended_at timestamptz NOT NULL DEFAULT now(),
    UNIQUE (publication_id, message_id)
);
CREATE INDEX ON bench_unpartitioned (publication_id, transaction_id, position);
"""
# Both tables are written by the same statement, so the comparison is of the tables alone.
INSERT_BATCH = """
INSERT INTO {} (publication_id, message_id, message_type, data)
SELECT 'retention', gen_random_uuid()::text, 'OrderPlaced', %s::jsonb FROM generate_series(1, %s)
"""
DELETE_RETIRE = "DELETE FROM bench_unpartitioned WHERE position < %s"
CHECKPOINT = """
UPDATE outbox.subscriptions SET last_processed_transaction_id = m.transaction_id,
       last_processed_position = m.position
FROM (SELECT transaction_id, position FROM outbox.messages ORDER BY position DESC LIMIT 1) AS m
WHERE subscription_id = 'retention-bench'
"""
SIZES = """
SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0)::bigint,
       coalesce(sum(s.n_dead_tup), 0)::bigint
FROM pg_class AS c LEFT JOIN pg_stat_user_tables AS s ON s.relid = c.oid
WHERE c.oid = %s::regclass OR c.oid IN (SELECT inhrelid FROM pg_inherits
                                          WHERE inhparent = %s::regclass)
"""
PARTITIONED = sql.Identifier("outbox", "messages")
UNPARTITIONED = sql.Identifier("bench_unpartitioned")
PARTITION_OF = "CREATE TABLE {} PARTITION OF outbox.messages FOR VALUES FROM ({}) TO ({})"


@dataclass
class Side:
    """One retention approach over the run."""

    write_rates: list[float] = field(default_factory=list)  # msg/s per round
    retire_seconds: float = 0.0
    sizes: list[int] = field(default_factory=list)  # table + indexes, bytes, per round
    dead: list[int] = field(default_factory=list)  # dead tuples, per round


def _sizes(conn: psycopg.Connection[Any], table: str) -> tuple[int, int]:
    conn.execute("SELECT pg_stat_force_next_flush()")
    row = conn.execute(SIZES, (table, table)).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def _timed(action: Callable[[], object]) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def _write(conn: psycopg.Connection[Any], table: sql.Composable, count: int) -> None:
    for _ in range(count // BATCH):
        with conn.transaction():
            conn.execute(sql.SQL(INSERT_BATCH).format(table), (json.dumps(PAYLOAD), BATCH))


def in_and_out(url: str, total: int) -> tuple[Side, Side]:
    """ROUNDS rounds of total/ROUNDS messages; after each, everything up to the previous round
    counts as delivered and retention runs, so about two rounds of messages stay."""
    per_round = max(BATCH, total // ROUNDS // BATCH * BATCH)
    options = DaemonOptions(
        retention_minimum_age=0.001, partition_size=per_round, partitions_ahead=2
    )
    partitioned, unpartitioned = Side(), Side()
    with psycopg.connect(url, autocommit=True) as conn:
        for (name,) in conn.execute("SELECT partition_name FROM outbox.message_partitions()"):
            conn.execute(sql.SQL("DROP TABLE {}").format(sql.Identifier("outbox", name)))
        conn.execute("SELECT outbox.create_message_partitions(%s, 2)", (per_round,))
        conn.execute(DELETE_TABLE)
        conn.execute(
            "INSERT INTO outbox.subscriptions (subscription_id, publication_id)"
            " VALUES ('retention-bench', 'retention')"
        )
        # Earlier modules used positions; the baseline table counts from 1.
        offset = _next_position(conn) - 1
        for _ in range(ROUNDS):
            seconds = _timed(lambda: _write(conn, PARTITIONED, per_round))
            partitioned.write_rates.append(per_round / seconds)
            seconds = _timed(lambda: _write(conn, UNPARTITIONED, per_round))
            unpartitioned.write_rates.append(per_round / seconds)
            partitioned.retire_seconds += _timed(lambda: retention_pass(conn, options))
            conn.execute(CHECKPOINT)  # delivered: retired at the next round's pass
            # The same rows go both ways: DELETE what the partitions no longer hold.
            kept_from = _first_kept(conn) - offset
            unpartitioned.retire_seconds += _timed(
                functools.partial(conn.execute, DELETE_RETIRE, (kept_from,))
            )
            for side, table in (
                (partitioned, "outbox.messages"),
                (unpartitioned, "bench_unpartitioned"),
            ):
                size, dead = _sizes(conn, table)
                side.sizes.append(size)
                side.dead.append(dead)
        conn.execute("DROP TABLE bench_unpartitioned")
    return partitioned, unpartitioned


def _next_position(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute("SELECT outbox.next_message_position()").fetchone()
    assert row is not None
    return int(row[0])


def _first_kept(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute("SELECT min(first_position) FROM outbox.message_partitions()").fetchone()
    assert row is not None
    return max(int(row[0]), 1)


def _writers_latency(
    url: str, window: float, creator: Callable[[threading.Event], None]
) -> list[float]:
    """Four writers append and commit one message at a time for `window` seconds while
    `creator` runs and a slow business transaction holds the outbox open for half of it."""
    stop = threading.Event()
    latencies: list[float] = []
    lock = threading.Lock()

    def write() -> None:
        with psycopg.connect(url) as conn:
            while not stop.is_set():
                started = time.perf_counter()
                outbox.append(conn, "latency", "T", PAYLOAD)
                conn.commit()
                with lock:
                    latencies.append(time.perf_counter() - started)

    def slow_transaction() -> None:
        with psycopg.connect(url) as conn:
            outbox.append(conn, "latency", "Slow", PAYLOAD)
            stop.wait(window / 2)
            conn.commit()

    threads = [threading.Thread(target=write) for _ in range(4)]
    threads += [
        threading.Thread(target=slow_transaction),
        threading.Thread(target=creator, args=(stop,)),
    ]
    for thread in threads:
        thread.start()
    time.sleep(window)
    stop.set()
    for thread in threads:
        thread.join(60)
    return latencies


def _next_partition(conn: psycopg.Connection[Any]) -> tuple[int, int]:
    row = conn.execute(
        "SELECT max(end_position), outbox.next_message_position() FROM outbox.message_partitions()"
    ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def _create_by_attach(url: str) -> Callable[[threading.Event], None]:
    def create(stop: threading.Event) -> None:
        with psycopg.connect(url, autocommit=True) as conn:
            while not stop.wait(0.02):
                end, next_position = _next_partition(conn)
                ahead = (end - next_position) // 1000 + 1
                conn.execute("SELECT outbox.create_message_partitions(1000, %s)", (ahead,))

    return create


def _create_partition_of(url: str) -> Callable[[threading.Event], None]:
    def create(stop: threading.Event) -> None:
        with psycopg.connect(url, autocommit=True) as conn:
            while not stop.wait(0.02):
                end, _ = _next_partition(conn)
                name = sql.Identifier("outbox", f"messages_from_{end}")
                conn.execute(sql.SQL(PARTITION_OF).format(name, end, end + 1000))

    return create


def _no_creation(stop: threading.Event) -> None:
    stop.wait()


def creation_latency(url: str, window: float) -> list[Measurement]:
    with psycopg.connect(url, autocommit=True) as conn:
        # Room for every writer: the partitions made during the windows lie beyond it.
        conn.execute("SELECT outbox.create_message_partitions(1000000, 2)")
    group = "append latency, 4 writers + a 50%-long open transaction"
    baseline = "no partition created meanwhile"
    measurements = []
    for variant, creator in (
        (baseline, _no_creation),
        ("create ahead (CREATE TABLE + ATTACH PARTITION)", _create_by_attach(url)),
        ("CREATE TABLE ... PARTITION OF", _create_partition_of(url)),
    ):
        latencies = _writers_latency(url, window, creator)
        p99 = statistics.quantiles(latencies, n=100)[98] if len(latencies) > 100 else max(latencies)
        for statistic, value in (("max", max(latencies)), ("p99", p99)):
            measurements.append(
                Measurement(
                    f"{group}: {statistic}",
                    variant,
                    value * 1000,
                    "ms",
                    None if variant == baseline else baseline,
                    note=f"{len(latencies):,} appends in {window:g} s",
                    higher_is_better=False,
                )
            )
    return measurements


def _mib(value: float) -> float:
    return value / 1024 / 1024


def run(database_url: str, quick: bool) -> list[Measurement]:
    total = 20_000 if quick else int(os.environ.get("OUTBOX_BENCH_RETENTION_MESSAGES", 5_000_000))
    partitioned, unpartitioned = in_and_out(database_url, total)
    measurements = []
    quarter = max(1, ROUNDS // 4)
    named = (("retire partitions", partitioned), ("DELETE rows", unpartitioned))
    baseline = "DELETE rows"
    for name, side in named:
        against = None if name == baseline else baseline
        rows = (
            ("write rate, first quarter", statistics.mean(side.write_rates[:quarter]), "msg/s", ""),
            ("write rate, last quarter", statistics.mean(side.write_rates[-quarter:]), "msg/s", ""),
            ("retention time, all rounds", side.retire_seconds, "s", ""),
            ("table + indexes, peak", _mib(max(side.sizes)), "MiB", ""),
            ("table + indexes, at the end", _mib(side.sizes[-1]), "MiB", ""),
            ("dead tuples, peak", max(side.dead), "rows", "autovacuum as configured"),
        )
        for group, value, unit, note in rows:
            measurements.append(
                Measurement(
                    f"{total:,} in and out: {group}",
                    name,
                    value,
                    unit,
                    against,
                    note,
                    higher_is_better=unit == "msg/s",
                )
            )
    measurements.sort(key=lambda m: m.group)
    return measurements + creation_latency(database_url, 2.0 if quick else 6.0)
