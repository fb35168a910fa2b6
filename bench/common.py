"""What every benchmark module returns, so the harness can print one table with ratios.

A benchmark module is `bench/<name>_bench.py` with `TITLE: str` and
`run(database_url: str, quick: bool) -> list[Measurement]`. Every measurement names the
baseline variant of its group, measured in the same run, and the harness prints
value / baseline beside it.
"""

import contextlib
import gc
import statistics
from collections.abc import Iterator
from dataclasses import dataclass


@dataclass(frozen=True)
class Measurement:
    group: str  # e.g. "writers=16"
    variant: str  # e.g. "(b) insert + outbox.append"
    value: float
    unit: str  # e.g. "tx/s", "rows/s", "ms"
    baseline: str | None = None  # variant of the same group this one is compared with
    note: str = ""
    higher_is_better: bool = True


def percentiles(latencies: list[float]) -> tuple[float, float, float]:
    """p50, p95 and p99 of latencies in seconds, in milliseconds."""
    cuts = statistics.quantiles(latencies, n=100)
    return cuts[49] * 1000, cuts[94] * 1000, cuts[98] * 1000


CPYTHON_COLLECTOR_THRESHOLDS = (700, 10, 10)


@contextlib.contextmanager
def cpython_default_collector() -> Iterator[None]:
    """For a contrast row: the collector as in a process that never called set_for_daemon
    (an application embedding the daemon without it). The benches otherwise run as
    `outbox poll` sets its process up (bench/__main__.py)."""
    thresholds = gc.get_threshold()
    gc.unfreeze()
    gc.set_threshold(*CPYTHON_COLLECTOR_THRESHOLDS)
    try:
        yield
    finally:
        gc.collect()
        gc.freeze()
        gc.set_threshold(*thresholds)
