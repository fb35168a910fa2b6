"""Leases under a CPU-bound handler: 64 shards led by one process.

A plain `def` handler burning 5 ms of CPU-bound Python a message holds the GIL from the event
loop most of the time (py-spy --gil: 87% of the samples for the handler threads, 9% for the
loop). Every lease of the process must still be renewed in time. One daemon process
(bench/daemon_processes.py, `outbox poll`'s default lease of 4 s) leads all 64 shards of a
subscription (pinned, 4 consumers, 1,000 keys); once it does, a backlog of N messages (6,000;
OUTBOX_BENCH_LEASE_MESSAGES sets N) is committed in one transaction and drained, for at most
LAST_SECONDS. Once on an otherwise idle machine, once beside 2 x cores processes spinning on
the CPU. For each: the leases lost (fencing tokens raised during the drain: each is a lease
taken again), the extra deliveries (handler calls on a message handled before), the messages
not delivered after DRAIN_SECONDS (the measure the issue gave), and how long the whole drain
took.
"""

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import psycopg

from bench.common import Measurement
from bench.daemon_processes import DaemonProcesses, iterations_for
from bench.shards_bench import create, leader_tokens, wait_for_leaders, write_backlog

TITLE = "Leases: 64 shards in one process under a CPU-bound handler (5 ms a message)"

MESSAGES_VARIABLE = "OUTBOX_BENCH_LEASE_MESSAGES"
SHARDS = 64
HANDLER_SECONDS = 0.005
SETTINGS = {"strategy": "pinned", "consumers": 4}
DRAIN_SECONDS = 120.0
LAST_SECONDS = 600.0  # a loaded machine leaves the process a fraction of a core
LEAD_TIMEOUT = 60.0

IDLE = "idle machine"
LOADED = "beside 2 x cores busy processes"


@dataclass(frozen=True)
class Drain:
    lost_leases: int
    extra_deliveries: int
    undelivered: int  # after DRAIN_SECONDS
    seconds: float  # until every message was delivered, or LAST_SECONDS


@contextlib.contextmanager
def cpu_load(processes: int) -> Iterator[None]:
    """`processes` Python processes spinning on the CPU while the block runs."""
    spinning = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(processes)
    ]
    try:
        yield
    finally:
        for process in spinning:
            process.kill()
        for process in spinning:
            process.wait()


def drain(url: str, name: str, count: int, iterations: int, load: int) -> Drain:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("TRUNCATE outbox.messages")
    create(url, name, SHARDS, SETTINGS)
    with DaemonProcesses(url, name, 1, iterations) as daemons:
        wait_for_leaders(url, name, SHARDS, daemons, LEAD_TIMEOUT)
        tokens = leader_tokens(url, name)
        with cpu_load(load):
            committed_at = write_backlog(url, name, count)
            undelivered = None
            while daemons.collect() < count and time.monotonic() < committed_at + LAST_SECONDS:
                if undelivered is None and time.monotonic() >= committed_at + DRAIN_SECONDS:
                    undelivered = count - len(daemons.handled)
                time.sleep(0.1)
            ended_at = time.monotonic()
            after = leader_tokens(url, name)
        daemons.collect()
        if undelivered is None:
            undelivered = count - len(daemons.handled)
        repeated = daemons.repeated
    lost = sum(after.get(shard, token) - token for shard, token in tokens.items())
    return Drain(lost, repeated, undelivered, ended_at - committed_at)


def run(database_url: str, quick: bool) -> list[Measurement]:
    count = 300 if quick else int(os.environ.get(MESSAGES_VARIABLE, "6000"))
    iterations = iterations_for(HANDLER_SECONDS)
    cores = os.cpu_count() or 1
    drains = {
        IDLE: drain(database_url, "lease-idle", count, iterations, 0),
        LOADED: drain(database_url, "lease-loaded", count, iterations, 2 * cores),
    }
    group = f"{SHARDS} shards, 1 process, {count:,} messages"
    rows: list[tuple[str, str, str, Callable[[Drain], float]]] = [
        ("leases lost", "leases", "aim 0", lambda d: d.lost_leases),
        ("extra deliveries", "calls", "aim 0", lambda d: d.extra_deliveries),
        ("undelivered", "messages", f"after {DRAIN_SECONDS:.0f} s; aim 0", lambda d: d.undelivered),
        ("drain", "s", f"until all delivered (at most {LAST_SECONDS:.0f} s)", lambda d: d.seconds),
    ]
    return [
        Measurement(f"{group}: {what}", variant, value(result), unit, None, note, False)
        for what, unit, note, value in rows
        for variant, result in drains.items()
    ]
