"""Consumer groups: throughput with 1, 8 and 32 consumers and a handler that awaits 1 ms,
round-robin and pinned, against the single-consumer drain rate with a no-op handler."""

import asyncio
import time

import psycopg

from bench.common import Measurement
from bench.poller_bench import fill
from poller import operations
from poller.daemon.background import DaemonThread
from poller.message import Message

TITLE = "Consumer groups: handler awaiting 1 ms, vs one consumer with a no-op handler"
BASELINE = "1 consumer, no-op handler"


class Counter:
    def __init__(self, pause: float) -> None:
        self.handled = 0
        self._pause = pause

    async def __call__(self, _message: Message) -> None:
        if self._pause:
            await asyncio.sleep(self._pause)
        self.handled += 1


def rate(database_url: str, settings: dict[str, object], pause: float, window: float) -> float:
    """Messages per second over `window` seconds, after a short warm-up."""
    name = f"group-{time.monotonic_ns()}"
    with psycopg.connect(database_url) as conn:
        operations.create(conn, name, "groups", "start", settings)
    counter = Counter(pause)
    with DaemonThread(database_url, [name], counter):
        time.sleep(min(1.0, window / 2))
        start_count, started = counter.handled, time.perf_counter()
        time.sleep(window)
        handled, elapsed = counter.handled - start_count, time.perf_counter() - started
    return handled / elapsed


def run(database_url: str, quick: bool) -> list[Measurement]:
    window = 1.0 if quick else 4.0
    # Enough backlog that no variant runs dry within its window (32 consumers x 1 ms).
    fill(database_url, "groups", 40_000 if quick else 400_000, keys=1000)
    group = "throughput"
    measurements = [Measurement(group, BASELINE, rate(database_url, {}, 0.0, window), "msg/s")]
    for strategy in ("round-robin", "pinned"):
        for consumers in (1, 8, 32):
            settings: dict[str, object] = {
                "strategy": strategy,
                "consumers": consumers,
                "max_in_flight": 1,
                "buffer_size": 2000,
            }
            measurements.append(
                Measurement(
                    group,
                    f"{strategy}, {consumers} consumers, 1 ms handler",
                    rate(database_url, settings, 0.001, window),
                    "msg/s",
                    BASELINE,
                    note=f"ceiling ~{consumers * 1000:,}/s at 1 ms each",
                )
            )
    return measurements
