"""`make bench`: run every bench/*_bench.py, print one table, keep a copy in bench/results/.

OUTBOX_BENCH_DATABASE_URL names the server (a database `outbox_bench` is created on it);
unset, an embedded PostgreSQL under .outbox/bench is used. `--quick` shrinks every workload
(used by the test that keeps the benchmarks runnable). Pass module names to run a subset.
"""

import argparse
import datetime
import importlib
import math
import os
import sys
from pathlib import Path

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from rich.console import Console
from rich.table import Table

from bench.common import Measurement
from outbox import schema_migrations as migrations
from poller.daemon import garbage_collection

BENCH_DIRECTORY = Path(__file__).parent
RESULTS_DIRECTORY = BENCH_DIRECTORY / "results"


def drop_database(url: str) -> None:
    name = str(conninfo_to_dict(url)["dbname"])
    with psycopg.connect(make_conninfo(url, dbname="postgres"), autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )


def bench_database(quick: bool) -> str:
    server = os.environ.get("OUTBOX_BENCH_DATABASE_URL")
    if not server:
        from outbox_cli.embedded_server import embedded_database_url

        server = embedded_database_url(BENCH_DIRECTORY.parent / ".outbox" / "bench")
    # Quick runs come from tests, maybe several at once on one server: a name per process.
    name = f"outbox_bench_quick_{os.getpid()}" if quick else "outbox_bench"
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    url = make_conninfo(server, dbname=name)
    migrations.upgrade(url)
    return url


def render(title: str, measurements: list[Measurement]) -> Table:
    table = Table(title=title)
    for column in ("group", "variant", "value", "unit", "ratio", "vs", "note"):
        table.add_column(column, justify="right" if column in ("value", "ratio") else "left")
    by_key = {(m.group, m.variant): m for m in measurements}
    for m in measurements:
        base = by_key.get((m.group, m.baseline)) if m.baseline else None
        # NaN is a value not measured (a run that failed, a figure not readable): the note
        # says why, and no ratio is made of it.
        measured = not math.isnan(m.value)
        ratio = (
            f"{m.value / base.value:.2f}x"
            if measured and base and base.value and not math.isnan(base.value)
            else ""
        )
        value = f"{m.value:,.2f}" if measured else "-"
        table.add_row(m.group, m.variant, value, m.unit, ratio, m.baseline or "", m.note)
    return table


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench")
    parser.add_argument("modules", nargs="*", help="e.g. writers (for bench/writers_bench.py)")
    parser.add_argument("--quick", action="store_true", help="tiny workloads, for smoke tests")
    arguments = parser.parse_args()
    names = arguments.modules or sorted(
        p.stem[: -len("_bench")] for p in BENCH_DIRECTORY.glob("*_bench.py")
    )
    url = bench_database(arguments.quick)
    # As `outbox poll` sets up its process: every daemon row and its baseline run under it.
    garbage_collection.set_for_daemon()
    # A smoke run's tables are read by its tests: no cell may wrap a phrase over two lines.
    console = Console(record=True, width=1000 if arguments.quick else 160)
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H-%M-%SZ")
    python = sys.version.split()[0]
    console.print(f"outbox-poller benchmarks, {stamp}, {os.cpu_count()} cores, python {python}")
    try:
        for name in names:
            module = importlib.import_module(f"bench.{name}_bench")
            measurements = module.run(url, arguments.quick)
            console.print(render(module.TITLE, measurements))
    finally:
        if arguments.quick:
            drop_database(url)
    if not arguments.quick:
        RESULTS_DIRECTORY.mkdir(exist_ok=True)
        text = console.export_text()
        (RESULTS_DIRECTORY / f"{stamp}.txt").write_text(text)
        (RESULTS_DIRECTORY / "latest.txt").write_text(text)


if __name__ == "__main__":
    main()
