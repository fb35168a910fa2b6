"""`outbox demo`: writers committing out of order, delivered by the daemon, live."""

import threading
import time
import uuid
from collections import Counter
from concurrent.futures import Future, ThreadPoolExecutor

import click
import psycopg
from rich.console import Console
from rich.live import Live
from rich.table import Table

from outbox.positions import readable
from outbox_cli.context import CommandContext
from outbox_cli.demo.live import CountingHandler
from outbox_cli.demo.relay_round import relay_round_unavailable, relay_to_nats
from outbox_cli.demo.workload import WorkloadShape, WriterTally, read_until, run_writers
from poller import operations
from poller.daemon import DaemonOptions, DaemonThread


@click.command()
@click.option("--writers", type=click.IntRange(1, 64), default=16, show_default=True)
@click.option(
    "--transactions",
    type=click.IntRange(1, 100_000),
    default=40,
    show_default=True,
    help="Per writer.",
)
@click.pass_obj
def demo(context: CommandContext, writers: int, transactions: int) -> None:
    """Deliver out-of-order commits with the daemon, and show what a naive reader loses.

    The demo's subscription and messages are deleted at the end, also after Ctrl-C or an error.
    """
    from outbox import (
        schema_migrations as migrations,  # alembic costs a second to import; only here
    )
    from outbox.settings import writer_settings

    # A refused OUTBOX_MAX_PAYLOAD_BYTES is a one-line error now, not one per writer thread.
    writer_settings()
    console = Console(highlight=False)
    url = context.database_url
    with context.connect():
        pass  # a connection failure names the URL before alembic wraps it
    migrations.upgrade(url)
    publication = subscription = f"demo-{uuid.uuid4().hex[:8]}"
    with context.connect() as conn:
        operations.create(
            conn,
            subscription,
            publication,
            "end",
            {"checkpoint_after": 0.2, "min_checkpoint_count": 1},
        )
    try:
        _run(console, url, publication, WorkloadShape(writers, transactions))
    finally:
        with context.connect() as conn:
            operations.delete(conn, subscription)
            operations.delete_publication_messages(conn, publication)


def _run(console: Console, url: str, publication: str, shape: WorkloadShape) -> None:
    subscription = publication
    console.print(
        f"{shape.writers} writers x {shape.transactions_per_writer} transactions into"
        f" [bold]{publication}[/], committing in random order, some rolled back; the daemon"
        " delivers as they go."
    )
    handler = CountingHandler()
    daemon = DaemonThread(
        url, [subscription], handler, DaemonOptions(lease_seconds=2.0, renew_every=0.5)
    )
    daemon.start()
    try:
        writers_done = threading.Event()
        with ThreadPoolExecutor(max_workers=2) as pool:
            naive = pool.submit(read_until, url, publication, writers_done, naive=True)
            writing = pool.submit(run_writers, url, publication, shape)
            try:
                tally = _show_progress(console, url, subscription, handler, writing)
            finally:
                # Also on Ctrl-C: the naive reader stops only once told the writers are done.
                writers_done.set()
            naive_read = naive.result()
    finally:
        daemon.stop()
    console.print(_summary(tally, handler, naive_read.positions))
    unavailable = relay_round_unavailable()
    if unavailable is None:
        console.print("NATS answers on localhost: relaying the same messages to JetStream...")
        round_ = relay_to_nats(url, publication, len(tally.committed))
        console.print(
            f"outbox relay -> NATS stream {round_.stream}: {round_.in_stream} messages for"
            f" {round_.committed} committed (de-duplicated by Nats-Msg-Id; stream removed)"
        )
    else:
        console.print(f"({unavailable}: the relay to JetStream is not shown)")


def _show_progress(
    console: Console,
    url: str,
    subscription: str,
    handler: CountingHandler,
    writing: Future[WriterTally],
) -> WriterTally:
    """Refresh the live table until every committed message is delivered (or 15 s after the
    writers finished, so a broken daemon cannot hang the demo)."""
    tally: WriterTally | None = None
    settle_deadline = float("inf")
    try:
        with Live(console=console, refresh_per_second=8) as live, psycopg.connect(url) as conn:
            while True:
                if writing.done() and tally is None:
                    tally = writing.result()
                    settle_deadline = time.monotonic() + 15
                delivered = handler.snapshot()
                committed = len(tally.committed) if tally else None
                checkpoint = operations.get(conn, subscription).checkpoint
                conn.commit()
                live.update(_progress_table(committed, delivered, readable(checkpoint)))
                done = set(delivered) >= tally.committed if tally else False
                if tally and (done or time.monotonic() > settle_deadline):
                    return tally
                time.sleep(0.125)
    finally:
        if not console.is_terminal:
            # Rich ends a live display's last frame with a line break on a terminal only:
            # the daemon's next log line (stderr, into the same file or pipe as stdout) was
            # glued onto the table's bottom edge.
            console.line()


def _progress_table(committed: int | None, delivered: Counter[int], checkpoint: str) -> Table:
    table = Table(title="Live")
    for column in ("written (committed)", "delivered", "lag", "checkpoint"):
        table.add_column(column, justify="right")
    shown = "writing..." if committed is None else str(committed)
    lag = "-" if committed is None else str(committed - len(delivered))
    table.add_row(shown, str(len(delivered)), lag, checkpoint)
    return table


def _summary(tally: WriterTally, handler: CountingHandler, naive_positions: list[int]) -> Table:
    delivered = handler.snapshot()
    table = Table(title="Every committed message")
    for column in ("reader", "committed", "read", "lost", "duplicated", "rolled back read"):
        table.add_column(column, justify="left" if column == "reader" else "right")
    naive = set(naive_positions)
    rows = {
        "outbox poller daemon": (
            sum(delivered.values()),
            len(tally.committed - set(delivered)),
            sum(count - 1 for count in delivered.values()),
            len(set(delivered) & tally.rolled_back),
        ),
        "naive position > last": (
            len(naive_positions),
            len(tally.committed - naive),
            len(naive_positions) - len(naive),
            len(naive & tally.rolled_back),
        ),
    }
    for name, (read, lost, duplicated, rolled_back) in rows.items():
        table.add_row(
            name, str(len(tally.committed)), str(read), str(lost), str(duplicated), str(rolled_back)
        )
    return table
