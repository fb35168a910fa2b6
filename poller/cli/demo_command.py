"""`outbox demo`: concurrent writers committing out of order, read safely and naively."""

import threading
import uuid
from concurrent.futures import ThreadPoolExecutor

import click
from rich.console import Console
from rich.table import Table

from poller.cli.context import CommandContext
from poller.database import migrations
from poller.demo.workload import ReaderTally, WorkloadShape, read_until, run_writers


@click.command()
@click.option("--writers", default=16, show_default=True)
@click.option("--transactions", default=40, show_default=True, help="Per writer.")
@click.pass_obj
def demo(context: CommandContext, writers: int, transactions: int) -> None:
    """Show what a snapshot-safe reader keeps and a `position > last` reader loses."""
    console = Console()
    url = context.database_url
    migrations.upgrade(url)
    publication = f"demo-{uuid.uuid4().hex[:8]}"
    shape = WorkloadShape(writers=writers, transactions_per_writer=transactions)
    console.print(
        f"{writers} writers x {transactions} transactions into [bold]{publication}[/],"
        " commits in random order, some rolled back..."
    )
    writers_done = threading.Event()
    with ThreadPoolExecutor(max_workers=2) as readers:
        safe = readers.submit(read_until, url, publication, writers_done, naive=False)
        naive = readers.submit(read_until, url, publication, writers_done, naive=True)
        tally = run_writers(url, publication, shape)
        writers_done.set()
        results = {"snapshot-safe": safe.result(), "naive position > last": naive.result()}

    table = Table(title="Every committed message, read while the writers ran")
    for column in ("reader", "committed", "read", "lost", "duplicated", "rolled back read"):
        table.add_column(column, justify="right" if column != "reader" else "left")
    for name, read in results.items():
        table.add_row(name, *map(str, _score(read, tally.committed, tally.rolled_back)))
    console.print(table)


def _score(read: ReaderTally, committed: set[int], rolled_back: set[int]) -> tuple[int, ...]:
    seen = set(read.positions)
    return (
        len(committed),
        len(read.positions),
        len(committed - seen),
        len(read.positions) - len(seen),
        len(seen & rolled_back),
    )
