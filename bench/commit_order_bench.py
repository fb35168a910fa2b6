"""What ordering messages by commit costs writers: migration 0017's default for
`transaction_id` (outbox.ordering_transaction_id()) against the writers' own xid, the default
before it, side by side in one run.

The two rules differ only in the column's default, so the bench switches it between rounds
(ALTER TABLE ONLY outbox.messages ALTER COLUMN transaction_id SET DEFAULT ...) while the writer
processes wait, and interleaves them round by round (before, after, then after, before, ...)
so a drift in the machine's load falls on both alike. Every transaction is a business insert
and one append:
- no key, and a key of the writer's own (1 and 16 writers): the append path alone;
- 12 hot keys (16 writers): the transaction locks one of twelve account rows and appends with
  the account as key, the row-lock serialisation the ordering is for;
- held (16 writers): the transaction stays open 0 to 50 ms after its append, as a business
  transaction doing more work would, which the frontier then waits for.
The read path does not change with the rule (the same statement over the same index); the
drain rate is the poller group's. What the rule can cost is latency: a message appended after a
newer transaction completed waits for the transactions running at its append with ids below
that one. So the bench also measures commit-to-read latency of the bare 1 ms read loop under 8
writer threads whose transactions write a business row first, work 0 to 5 ms, then append
(the case where a message's id can rise above its writer's), at about 400 tx/s in all.
"""

import os
import random
import statistics
import threading
import time
import uuid

import psycopg
from psycopg.rows import TupleRow

import outbox
from bench.common import Measurement, percentiles
from bench.load_bench import bare_loop
from bench.writers_bench import Cell, Step, _partitions_from_position_one, measure, writer_processes

TITLE = "Commit order: writer throughput with 0017's ordering default, against the writers' own xid"

PUBLICATION = "orders"
ACCOUNTS = 12
HOLD_SECONDS = 0.05
LATENCY_WRITERS = 8
LATENCY_RATE = 500.0  # transactions per second, all latency writers together
BEFORE = "writers' own xid (before)"
AFTER = "ordering_transaction_id (0017)"
DEFAULTS = {BEFORE: "pg_current_xact_id()", AFTER: "outbox.ordering_transaction_id()"}

SETUP = """
CREATE TABLE IF NOT EXISTS commit_order_business (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    customer int NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS commit_order_accounts (id int PRIMARY KEY, sequence bigint NOT NULL);
"""
RESET = """
TRUNCATE commit_order_business, outbox.messages RESTART IDENTITY;
TRUNCATE commit_order_accounts;
INSERT INTO commit_order_accounts SELECT n, 0 FROM generate_series(0, 11) AS n;
"""

Conn = psycopg.Connection[TupleRow]


def _business(conn: Conn, n: int) -> dict[str, object]:
    conn.execute("INSERT INTO commit_order_business (customer) VALUES (%s)", (n % 1000,))
    return {"order_id": n, "customer": n % 1000}


def no_key(conn: Conn, n: int) -> None:
    outbox.append(conn, PUBLICATION, "OrderPlaced", _business(conn, n))


def own_key(conn: Conn, n: int) -> None:
    key = f"writer-{os.getpid()}"
    outbox.append(conn, PUBLICATION, "OrderPlaced", _business(conn, n), partition_key=key)


def hot_keys(conn: Conn, n: int) -> None:
    data = _business(conn, n)
    account = random.randrange(ACCOUNTS)
    conn.execute(
        "UPDATE commit_order_accounts SET sequence = sequence + 1 WHERE id = %s", (account,)
    )
    outbox.append(conn, PUBLICATION, "Posted", data, partition_key=f"account-{account}")


def held(conn: Conn, n: int) -> None:
    outbox.append(
        conn, PUBLICATION, "OrderPlaced", _business(conn, n), partition_key=str(uuid.uuid4())
    )
    time.sleep(random.uniform(0.0, HOLD_SECONDS))


WORKLOADS: list[tuple[str, Step, int]] = [
    ("no key", no_key, 1),
    ("own key", own_key, 1),
    ("no key", no_key, 16),
    ("own key", own_key, 16),
    ("12 hot keys, row-locked", hot_keys, 16),
    ("held 0-50 ms", held, 16),
]


def run(database_url: str, quick: bool) -> list[Measurement]:
    rounds, warm_up, seconds = (2, 0.05, 0.15) if quick else (24, 0.1, 0.4)
    cells = {(name, count, rule): Cell() for name, _, count in WORKLOADS for rule in DEFAULTS}
    with psycopg.connect(database_url, autocommit=True) as admin:
        admin.execute(SETUP)
        _partitions_from_position_one(admin)
        try:
            with writer_processes(database_url, 16, __name__) as pipes:
                for round_ in range(rounds):
                    rules = list(DEFAULTS) if round_ % 2 == 0 else list(reversed(DEFAULTS))
                    for name, step, count in WORKLOADS:
                        # The held workload's transactions last up to 50 ms: longer rounds.
                        length = seconds * 4 if step is held else seconds
                        for rule in rules:
                            _use_default(admin, rule)
                            admin.execute(RESET)
                            measure(pipes[:count], step, warm_up, length, cells[name, count, rule])
        finally:
            _use_default(admin, AFTER)
    return [
        measurement
        for name, _, count in WORKLOADS
        for measurement in _pair(f"{name}, {count} writer{'s' * (count > 1)}", cells, name, count)
    ] + latency(database_url, quick)


def latency(database_url: str, quick: bool) -> list[Measurement]:
    """Commit-to-read latency of the bare loop, both rules in interleaved rounds."""
    rounds, seconds = (1, 0.5) if quick else (3, 6.0)
    latencies: dict[str, list[float]] = {rule: [] for rule in DEFAULTS}
    with psycopg.connect(database_url, autocommit=True) as admin:
        try:
            for round_ in range(rounds):
                rules = list(DEFAULTS) if round_ % 2 == 0 else list(reversed(DEFAULTS))
                for rule in rules:
                    _use_default(admin, rule)
                    latencies[rule] += _latencies(
                        database_url, f"latency-{round_}-{rule[:5]}", seconds
                    )
        finally:
            _use_default(admin, AFTER)
    group = f"commit to read, {LATENCY_WRITERS} writers working 0-5 ms before the append"
    measurements = []
    for name, index in (("p50", 0), ("p99", 2)):
        before, after = percentiles(latencies[BEFORE])[index], percentiles(latencies[AFTER])[index]
        measurements += [
            Measurement(f"{group}, {name}", BEFORE, before, "ms", higher_is_better=False),
            Measurement(
                f"{group}, {name}",
                AFTER,
                after,
                "ms",
                baseline=BEFORE,
                note=f"{len(latencies[AFTER]):,} messages",
                higher_is_better=False,
            ),
        ]
    return measurements


def _latencies(url: str, publication: str, seconds: float) -> list[float]:
    """Each message's commit-to-read time, seconds, for writers running `seconds`."""
    committed: dict[str, float] = {}
    read_at: dict[str, float] = {}
    end = time.monotonic() + seconds

    def write(writer: int) -> None:
        chooser = random.Random(writer)
        pause = LATENCY_WRITERS / LATENCY_RATE
        with psycopg.connect(url) as conn:
            n = 0
            while time.monotonic() < end:
                _business(conn, n)
                time.sleep(chooser.uniform(0.0, 0.005))  # the transaction's own work
                message_id = f"{publication}-{writer}-{n}"
                outbox.append(conn, publication, "Worked", {}, message_id=message_id)
                conn.commit()
                committed[message_id] = time.monotonic()
                n += 1
                time.sleep(chooser.uniform(0.0, 2 * pause))

    with bare_loop(url, publication, read_at):
        writers = [threading.Thread(target=write, args=(n,)) for n in range(LATENCY_WRITERS)]
        for writer in writers:
            writer.start()
        for writer in writers:
            writer.join()
        deadline = time.monotonic() + 30
        while not committed.keys() <= read_at.keys() and time.monotonic() < deadline:
            time.sleep(0.01)
    return [read_at[m] - t for m, t in committed.items() if m in read_at]


def _use_default(admin: Conn, rule: str) -> None:
    admin.execute(
        "ALTER TABLE ONLY outbox.messages ALTER COLUMN transaction_id SET DEFAULT "
        + DEFAULTS[rule]  # a constant of this module, not input
    )


def _pair(
    group: str, cells: dict[tuple[str, int, str], Cell], name: str, count: int
) -> list[Measurement]:
    before, after = cells[name, count, BEFORE], cells[name, count, AFTER]
    # Each round measured both rules back to back: the median of those pairs' ratios is what
    # a swing of the disk's fsync latency (the rounds' spread) leaves of the difference.
    paired = statistics.median(a / b for a, b in zip(after.rates, before.rates, strict=True) if b)
    return [
        Measurement(group, BEFORE, before.per_second, "tx/s", note=f"±{before.spread:.0%}"),
        Measurement(
            group,
            AFTER,
            after.per_second,
            "tx/s",
            baseline=BEFORE,
            note=f"±{after.spread:.0%}; round by round {paired:.2f}x; aim >= 0.9x",
        ),
    ]
