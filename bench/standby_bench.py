"""Reads from a hot standby against reads from the primary, in the same run.

A primary and a streaming-replication standby of the bench's own (tests/support/
replica_pair.py, the tests' pair: the embedded PostgreSQL's binaries, whatever server
OUTBOX_BENCH_DATABASE_URL names), and the daemon in this process with its defaults, reading
from the primary, then from the standby (DaemonOptions.read_database_url), round after round:
- drain: a backlog of N messages (one INSERT, replayed by the standby before the clock
  starts), a no-op `def` handler, from the start of the daemon to the last handler call;
- latency: one writer committing ~500 messages/s on the primary, one per transaction, commit
  to handler (the standby's includes its replay lag);
- the primary's CPU per delivered message in each: every process of the primary's cluster
  (postmaster, backends, the walsender, background processes), from /proc: their utime and
  stime, with the postmaster's cutime and cstime for those that exited meanwhile. The
  latency runs count the writer's backend too, the same in both variants.
Each figure is the median of its rounds.
"""

import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import psycopg

from bench.common import Measurement, percentiles
from bench.poller_bench import Countdown, LatencyRecorder, fill, sync_handler, write_steadily
from poller import operations
from poller.daemon.background import DaemonThread
from poller.daemon.options import DaemonOptions
from tests.support.replica_pair import ReplicaPair, Server, replica_pair

TITLE = "Reads from a hot standby: drain, latency and the primary's CPU per message"

PRIMARY = "reads on the primary"
STANDBY = "reads on the standby"

T = TypeVar("T")


def run(_database_url: str, quick: bool) -> list[Measurement]:
    backlog = 5_000 if quick else 200_000
    seconds = 0.5 if quick else 6.0
    rounds = 1 if quick else 3
    with replica_pair() as pair:
        primary, standby = pair.migrated_database("outbox_standby_bench")
        fill(primary, "drain", backlog)
        pair.wait_replayed()
        drains: dict[str, list[tuple[float, float]]] = {PRIMARY: [], STANDBY: []}
        latencies: dict[str, list[tuple[tuple[float, float, float], float]]] = {
            PRIMARY: [],
            STANDBY: [],
        }
        for _ in range(rounds):
            for variant, read_url in ((PRIMARY, None), (STANDBY, standby)):
                options = DaemonOptions(read_database_url=read_url)
                drains[variant].append(drain(pair, primary, backlog, options))
                latencies[variant].append(latency(pair, primary, seconds, options))
    return _measurements(backlog, drains, latencies)


def drain(
    pair: ReplicaPair, primary: str, count: int, options: DaemonOptions
) -> tuple[float, float]:
    """Messages a second, and the primary's CPU microseconds per message."""
    name = f"drain-{time.monotonic_ns()}"
    with psycopg.connect(primary) as conn:
        operations.create(conn, name, "drain", "start", {})
    countdown = Countdown(count)

    def delivered() -> float:
        with DaemonThread(primary, [name], sync_handler(countdown), options):
            if not countdown.done.wait(timeout=600):
                raise RuntimeError(f"the daemon drained {count - countdown.remaining} of {count}")
            return time.perf_counter()

    started = time.perf_counter()
    finished, cpu = _with_cpu(pair.primary, delivered)
    return count / (finished - started), cpu / count * 1e6


def latency(
    pair: ReplicaPair, primary: str, seconds: float, options: DaemonOptions
) -> tuple[tuple[float, float, float], float]:
    """p50, p95 and p99 in ms, and the primary's CPU microseconds per delivered message."""
    publication = f"latency-{time.monotonic_ns()}"
    with psycopg.connect(primary) as conn:
        operations.create(conn, publication, publication, "end", {})
    recorder = LatencyRecorder()
    with DaemonThread(primary, [publication], recorder, options):
        time.sleep(0.5)  # leading, reading: what is measured is the steady state
        committed, cpu = _with_cpu(
            pair.primary, lambda: write_steadily(primary, publication, seconds, notify=False)
        )
        time.sleep(0.5)
    waits = [recorder.handled_at[k] - t for k, t in committed.items() if k in recorder.handled_at]
    return percentiles(waits), cpu / max(1, len(waits)) * 1e6


def _with_cpu(server: Server, work: Callable[[], T]) -> tuple[T, float]:
    """What `work` returns, and the CPU seconds `server`'s processes spent meanwhile."""
    before = cluster_cpu_seconds(server)
    result = work()
    return result, cluster_cpu_seconds(server) - before


def cluster_cpu_seconds(server: Server) -> float:
    """CPU seconds of every process of `server`'s cluster so far: the postmaster, its live
    children, and the children that have exited (the postmaster has waited for them all)."""
    postmaster = int((server.data / "postmaster.pid").read_text().split()[0])
    ticks = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # exited while listed
            continue
        pid, parent = int(stat.parent.name), int(fields[1])
        if pid == postmaster:
            ticks += sum(int(value) for value in fields[11:15])  # utime stime cutime cstime
        elif parent == postmaster:
            ticks += int(fields[11]) + int(fields[12])  # utime stime
    return ticks / os.sysconf("SC_CLK_TCK")


def _measurements(
    backlog: int,
    drains: dict[str, list[tuple[float, float]]],
    latencies: dict[str, list[tuple[tuple[float, float, float], float]]],
) -> list[Measurement]:
    measurements = []
    group = f"drain {backlog:,} messages"
    for variant, runs in drains.items():
        baseline = None if variant == PRIMARY else PRIMARY
        rate = statistics.median(r[0] for r in runs)
        measurements.append(Measurement(group, variant, rate, "msg/s", baseline, "no-op def"))
    cpu_group = f"primary CPU per message, drain {backlog:,}"
    for variant, runs in drains.items():
        baseline = None if variant == PRIMARY else PRIMARY
        cpu = statistics.median(r[1] for r in runs)
        measurements.append(
            Measurement(cpu_group, variant, cpu, "us", baseline, "all its processes, /proc", False)
        )
    for quantile, index in (("p50", 0), ("p95", 1), ("p99", 2)):
        group = f"latency {quantile} at ~500 msg/s"
        for variant, timed in latencies.items():
            baseline = None if variant == PRIMARY else PRIMARY
            value = statistics.median(r[0][index] for r in timed)
            note = "commit to handler, replay included" if variant == STANDBY else ""
            measurements.append(Measurement(group, variant, value, "ms", baseline, note, False))
    cpu_group = "primary CPU per message, at ~500 msg/s"
    for variant, timed in latencies.items():
        baseline = None if variant == PRIMARY else PRIMARY
        cpu = statistics.median(r[1] for r in timed)
        measurements.append(
            Measurement(cpu_group, variant, cpu, "us", baseline, "writer's backend included", False)
        )
    return measurements
