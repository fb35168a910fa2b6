"""What an outbox append costs a business transaction, next to the other ways to keep order.

Every cell runs N writer processes for a fixed time, each with its own connection and one
transaction at a time: (a) a business insert alone, or (a) plus one step. Processes rather
than threads, so no GIL caps the rate. The Python clients still share the machine's cores with
the server, so (b0), the same append hand-written in psycopg, is the control: (b) against (b0)
is what the library costs; (b0) against the raw SQL reference is what the client costs.

(b) passes no message_id, so like (b0) it inserts under a fresh UUID with no duplicate check:
the two run the same INSERT. (b1) passes an explicit message_id, which buys the idempotent
append (a repeated id writes nothing): a transaction-level advisory lock on the id, then a
lookup before the insert, because no unique index can span the partitions. (b0) has no such
check, so (b1) against (b0) is what idempotency costs, not what the library costs.

Order: within a writer count, rounds run a, b0, b, b1, c, d, e, f, then the reverse, and so on, so
a drift in machine load (2 cores, shared) falls on every variant alike. Every variant starts on
truncated tables, so none pays for rows an earlier one left behind.
"""

import contextlib
import math
import multiprocessing
import os
import statistics
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from decimal import Decimal
from multiprocessing.connection import Connection as Pipe
from multiprocessing.context import ForkServerContext

import orjson
import psycopg
from psycopg import sql
from psycopg.rows import TupleRow

import outbox
from bench.common import Measurement

TITLE = "writers: transactions per second by concurrent writer processes, ratios to (a)"

WRITER_COUNTS = (1, 4, 16)
PUBLICATION = "orders"
BATCH_SIZE = 10

BUSINESS = "(a) business insert"
RAW_APPEND = "(b0) + INSERT, no library"
APPEND = "(b) + outbox.append"
APPEND_WITH_ID = "(b1) + append(message_id=...)"
GAPLESS = "(c) + gapless counter"
LOCKED = "(d) + LOCK TABLE EXCLUSIVE"
NOTIFY = "(e) + append(notify=True)"
BATCH = f"(f) + outbox.append_many x{BATCH_SIZE}"
APPEND_ROWS = "(b) outbox rows"
BATCH_ROWS = f"(f) outbox rows, {BATCH_SIZE} per tx"

# Ratios to (a) at 16 clients measured with raw SQL on the reference machine (the issue).
RAW_SQL_REFERENCE = {APPEND: 0.64, GAPLESS: 0.17, LOCKED: 0.14, NOTIFY: 0.25}
RAW_SQL_BATCH_ROWS_REFERENCE = 5.4

SETUP = """
CREATE TABLE bench_orders (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    customer int NOT NULL,
    total numeric NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE bench_seq (id bigint NOT NULL);
-- Shaped like outbox.messages (indexes, constraints, defaults), so (c) and (d) pay the same
-- per-row cost as (b) and differ only in how they order rows.
CREATE TABLE bench_gapless_outbox (LIKE outbox.messages INCLUDING ALL);
ALTER TABLE bench_gapless_outbox ALTER COLUMN position DROP IDENTITY;
CREATE TABLE bench_locked_outbox (LIKE outbox.messages INCLUDING ALL);
"""

RESET = """
TRUNCATE bench_orders, bench_seq, bench_gapless_outbox, bench_locked_outbox, outbox.messages
    RESTART IDENTITY;
INSERT INTO bench_seq VALUES (0);
"""

INSERT_ORDER = "INSERT INTO bench_orders (customer, total) VALUES (%s, %s)"
OUTBOX_COLUMNS = "publication_id, message_id, message_type, partition_key, data, headers"
INSERT_RAW = (
    f"INSERT INTO outbox.messages ({OUTBOX_COLUMNS})"
    " VALUES (%s, %s, %s, %s, %s::jsonb, %s::jsonb) RETURNING position"
)
NEXT_GAPLESS = "UPDATE bench_seq SET id = id + 1 RETURNING id"
INSERT_GAPLESS = (
    f"INSERT INTO bench_gapless_outbox (position, {OUTBOX_COLUMNS})"
    " VALUES (%s, %s, %s, %s, %s, %s::jsonb, %s::jsonb)"
)
LOCK = "LOCK TABLE bench_locked_outbox IN EXCLUSIVE MODE"
INSERT_LOCKED = (
    f"INSERT INTO bench_locked_outbox ({OUTBOX_COLUMNS})"
    " VALUES (%s, %s, %s, %s, %s::jsonb, %s::jsonb) RETURNING position"
)

Conn = psycopg.Connection[TupleRow]
TOTAL = Decimal("99.50")


def _order(conn: Conn, n: int) -> dict[str, object]:
    conn.execute(INSERT_ORDER, (n % 1000, TOTAL))
    return {"order_id": n, "customer": n % 1000, "total": "99.50"}


def _raw_row(data: dict[str, object]) -> tuple[str, str, str, None, str, str]:
    # The library's row for the same call (a fresh uuid, no key, no headers), with the JSON
    # encoded by orjson, already a dependency, as a hand-written writer would.
    return (PUBLICATION, str(uuid.uuid4()), "OrderPlaced", None, orjson.dumps(data).decode(), "{}")


def business(conn: Conn, n: int) -> None:
    _order(conn, n)


def raw_append(conn: Conn, n: int) -> None:
    conn.execute(INSERT_RAW, _raw_row(_order(conn, n))).fetchone()


def append(conn: Conn, n: int) -> None:
    outbox.append(conn, PUBLICATION, "OrderPlaced", _order(conn, n))


def append_with_id(conn: Conn, n: int) -> None:
    # Unique within a round (tables are truncated between rounds): the process and its count.
    message_id = f"order-{os.getpid()}-{n}"
    outbox.append(conn, PUBLICATION, "OrderPlaced", _order(conn, n), message_id=message_id)


def gapless(conn: Conn, n: int) -> None:
    data = _order(conn, n)
    # Two statements, as a gapless writer does it: the counter row stays locked from here to
    # commit, through the outbox insert's round trip.
    row = conn.execute(NEXT_GAPLESS).fetchone()
    assert row is not None
    conn.execute(INSERT_GAPLESS, (row[0], *_raw_row(data)))


def locked(conn: Conn, n: int) -> None:
    data = _order(conn, n)
    # What the eventsourcing library does: readers can then trust position order at commit.
    conn.execute(LOCK)
    conn.execute(INSERT_LOCKED, _raw_row(data)).fetchone()


def notify(conn: Conn, n: int) -> None:
    outbox.append(conn, PUBLICATION, "OrderPlaced", _order(conn, n), notify=True)


def append_batch(conn: Conn, n: int) -> None:
    data = _order(conn, n)
    messages = [outbox.NewMessage("OrderPlaced", {**data, "line": i}) for i in range(BATCH_SIZE)]
    outbox.append_many(conn, PUBLICATION, messages)


Step = Callable[[Conn, int], None]
VARIANTS: dict[str, Step] = {
    BUSINESS: business,
    RAW_APPEND: raw_append,
    APPEND: append,
    APPEND_WITH_ID: append_with_id,
    GAPLESS: gapless,
    LOCKED: locked,
    NOTIFY: notify,
    BATCH: append_batch,
}


@dataclass
class Cell:
    """One variant at one writer count: a rate per round, and what the clients cost."""

    rates: list[float] = field(default_factory=list)
    client_cpu: float = 0.0  # CPU seconds of the writer processes, warm-up included
    client_span: float = 0.0  # the wall time those CPU seconds were spent in

    @property
    def per_second(self) -> float:
        # The median, not the mean: other work on the machine comes in bursts that can halve
        # one round, and the median ignores a burst that the mean would spread over the cell.
        return statistics.median(self.rates)

    @property
    def spread(self) -> float:
        """Half the interquartile range of the rounds, relative to the median: the noise."""
        first, _, third = statistics.quantiles(self.rates, n=4)
        return _ratio((third - first) / 2, self.per_second)

    @property
    def client_share(self) -> float:
        """How much of the machine the Python writers took, which the server then lacked."""
        return self.client_cpu / self.client_span / multiprocessing.cpu_count()


def _ratio(numerator: float, denominator: float) -> float:
    # A variant can commit nothing in a --quick round on a stalled machine; report, not crash.
    return numerator / denominator if denominator else math.nan


def _drive(conn: Conn, step: Step, start: float, end: float) -> tuple[int, float, float]:
    """Transactions from now until `end`; only commits in [start, end) count."""
    began, cpu = time.monotonic(), time.process_time()
    committed = 0
    n = 0
    while True:
        step(conn, n)
        conn.commit()
        n += 1
        now = time.monotonic()
        if now >= end:
            return committed, time.process_time() - cpu, now - began
        if now >= start:
            committed += 1


def _writer(url: str, commands: Pipe) -> None:
    """A writer process: one connection, kept from round to round, running the step it is
    sent (a module-level function, which pickles as its name)."""
    with psycopg.connect(url) as conn:
        while command := commands.recv():
            step, start, end = command
            commands.send(_drive(conn, step, start, end))


@contextlib.contextmanager
def writer_processes(url: str, count: int, steps_module: str = __name__) -> Iterator[list[Pipe]]:
    """`count` writer processes; `steps_module` holds the steps they will be sent."""
    context = multiprocessing.get_context("forkserver")
    assert isinstance(context, ForkServerContext)
    # Imported once in the fork server, so 16 writers start by fork, not 16 interpreters
    # importing psycopg, pydantic and SQLAlchemy on 2 cores.
    context.set_forkserver_preload([__name__, steps_module])
    pipes = [context.Pipe() for _ in range(count)]
    processes = [context.Process(target=_writer, args=(url, child)) for _, child in pipes]
    for process in processes:
        process.start()
    for _, child in pipes:
        # Only the writer may hold its end: a writer that dies then reads as EOFError here
        # instead of leaving the parent waiting for its answer forever.
        child.close()
    try:
        yield [parent for parent, _ in pipes]
    finally:
        for parent, _ in pipes:
            with contextlib.suppress(OSError):  # that writer is already gone
                parent.send(None)
        for process in processes:
            process.join(timeout=10)
            if process.is_alive():  # stuck behind a lock after a failure elsewhere
                process.kill()


def measure(writers: list[Pipe], step: Step, warm_up: float, seconds: float, cell: Cell) -> None:
    # CLOCK_MONOTONIC is system-wide, so one deadline means the same instant in every process.
    start = time.monotonic() + warm_up
    for pipe in writers:
        pipe.send((step, start, start + seconds))
    transactions, span = 0, 0.0
    for pipe in writers:
        committed, cpu, wall = pipe.recv()
        transactions += committed
        cell.client_cpu += cpu
        span = max(span, wall)
    cell.rates.append(transactions / seconds)
    cell.client_span += span


def run(database_url: str, quick: bool) -> list[Measurement]:
    # Many short rounds rather than a few long ones: fsync latency on a shared disk swings
    # several-fold within seconds, and only fine interleaving puts every variant under the same
    # swings. Writers keep their connections and prepared statements from round to round, so
    # the warm-up only has to get all of them running before the count starts.
    rounds, warm_up, seconds = (2, 0.05, 0.15) if quick else (16, 0.1, 0.25)
    cells: dict[tuple[int, str], Cell] = {
        (count, variant): Cell() for count in WRITER_COUNTS for variant in VARIANTS
    }
    with psycopg.connect(database_url, autocommit=True) as admin:
        admin.execute(SETUP)
        _partitions_from_position_one(admin)
        with writer_processes(database_url, max(WRITER_COUNTS)) as pipes:
            for count in WRITER_COUNTS:
                for round_ in range(rounds):
                    for variant in reversed(VARIANTS) if round_ % 2 else VARIANTS:
                        admin.execute(RESET)
                        cell = cells[count, variant]
                        measure(pipes[:count], VARIANTS[variant], warm_up, seconds, cell)
    return [m for count in WRITER_COUNTS for m in _group(count, cells)]


def _partitions_from_position_one(admin: Conn) -> None:
    """RESET restarts positions at 1, which the partitions must cover; the retention bench,
    run before this one by `make bench`, leaves partitions for later positions only."""
    partitions = admin.execute("SELECT partition_name FROM outbox.message_partitions()")
    for (name,) in partitions.fetchall():
        admin.execute(sql.SQL("DROP TABLE {}").format(sql.Identifier("outbox", name)))
    admin.execute("TRUNCATE outbox.messages RESTART IDENTITY")
    admin.execute("SELECT outbox.create_message_partitions(1000000, 2)")


def _group(count: int, cells: dict[tuple[int, str], Cell]) -> list[Measurement]:
    group = f"writers={count}"
    rate = {variant: cells[count, variant].per_second for variant in VARIANTS}

    def note(variant: str, *extra: str) -> str:
        reference = RAW_SQL_REFERENCE.get(variant)
        parts = [f"raw SQL ref {reference:.2f}x"] if reference and count == 16 else []
        cell = cells[count, variant]
        parts += [*extra, f"±{cell.spread:.0%}", f"client CPU {cell.client_share:.0%}"]
        return "; ".join(parts)

    def beaten_by_append(variant: str) -> str:
        return f"(b) {_ratio(rate[APPEND], rate[variant]):.2f}x this"

    notes = {
        BUSINESS: note(BUSINESS),
        RAW_APPEND: note(RAW_APPEND, beaten_by_append(RAW_APPEND)),
        APPEND: note(APPEND, "same INSERT as (b0): fresh ids, no duplicate check"),
        APPEND_WITH_ID: note(
            APPEND_WITH_ID,
            f"{_ratio(rate[APPEND_WITH_ID], rate[RAW_APPEND]):.2f}x (b0)",
            "a duplicate check (b0) lacks",
        ),
        GAPLESS: note(GAPLESS, beaten_by_append(GAPLESS)),
        LOCKED: note(LOCKED, beaten_by_append(LOCKED)),
        NOTIFY: note(NOTIFY),
        BATCH: note(BATCH),
    }
    measurements = [
        Measurement(
            group,
            variant,
            rate[variant],
            "tx/s",
            baseline=None if variant == BUSINESS else BUSINESS,
            note=notes[variant],
        )
        for variant in VARIANTS
    ]
    batch_reference = (
        f"raw SQL ref {RAW_SQL_BATCH_ROWS_REFERENCE:.1f}x" if count == 16 else "rows/s vs (b)"
    )
    return [
        *measurements,
        Measurement(group, APPEND_ROWS, rate[APPEND], "rows/s"),
        Measurement(
            group,
            BATCH_ROWS,
            rate[BATCH] * BATCH_SIZE,
            "rows/s",
            baseline=APPEND_ROWS,
            note=batch_reference,
        ),
    ]
