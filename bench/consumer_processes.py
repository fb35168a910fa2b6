"""Consumers in processes of their own, started as their users start them: `outbox poll` with
a plain `def` handler that notes the time, and eventsourcing's follower
(bench/eventsourcing_follower.py). Each writes when it handled each message to a file
(bench/handled_times.py) that a thread here reads every 10 ms into the bench's `handled_at`.
Both stop on SIGTERM.
"""

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path

import psycopg

from bench import handled_times
from poller import operations

PROJECT_ROOT = Path(__file__).resolve().parent.parent
RECORD_HANDLER = "bench.handled_times:record"
STOP_TIMEOUT = 30.0

HandledAt = dict[str, float]
StartedAt = Callable[[float], None]
Consumer = Callable[[str, str, HandledAt], AbstractContextManager[None]]


def _outbox_command() -> list[str]:
    """The `outbox` console script beside this interpreter, as a user runs it."""
    script = Path(sys.executable).with_name("outbox")
    return [str(script)] if script.exists() else [sys.executable, "-m", "outbox_cli"]


@contextlib.contextmanager
def consumer_process(
    arguments: list[str],
    environment: dict[str, str],
    handled_at: HandledAt,
    started_at: StartedAt | None = None,
) -> Iterator[None]:
    """Run `arguments` (from the project's folder, where `bench` imports) while the block
    runs, collecting what it handled; `started_at` is told the time right before it starts."""
    with tempfile.TemporaryDirectory(prefix="outbox-bench-") as folder:
        path = Path(folder) / "handled"
        handled = handled_times.HandledFile(path)
        env = {**os.environ, **environment, handled_times.VARIABLE: str(path)}
        if started_at is not None:
            started_at(time.monotonic())
        process = subprocess.Popen(arguments, cwd=PROJECT_ROOT, env=env)
        stop = threading.Event()

        def collect() -> None:
            while not stop.wait(handled_times.FLUSH_EVERY):
                handled.take(handled_at)

        collector = threading.Thread(target=collect, name="collect-handled")
        collector.start()
        try:
            yield
        finally:
            stop.set()
            collector.join()
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            handled.take(handled_at)
        if process.returncode not in (0, -signal.SIGTERM):
            raise RuntimeError(f"{arguments[0]} exited with {process.returncode}")


def outbox_poll(started_at: StartedAt | None = None, publication: str | None = None) -> Consumer:
    """`outbox poll` on a new subscription, named as the publication it is given (of
    `publication` when that is given), from the publication's start."""

    def consumer(url: str, name: str, handled_at: HandledAt) -> AbstractContextManager[None]:
        with psycopg.connect(url) as conn:
            operations.create(conn, name, publication or name, "start", {})
        arguments = [
            *_outbox_command(),
            "poll",
            "--database-url",
            url,
            "--subscription",
            name,
            "--handler",
            RECORD_HANDLER,
        ]
        # Its INFO lines (leading, stopped) stay out of the bench's table.
        quiet = {"OUTBOX_LOG_LEVEL": "WARNING"}
        return consumer_process(arguments, quiet, handled_at, started_at)

    return consumer


def eventsourcing_follower(started_at: StartedAt | None = None) -> Consumer:
    """eventsourcing's follower from the first event of its application."""

    def consumer(url: str, _name: str, handled_at: HandledAt) -> AbstractContextManager[None]:
        arguments = [sys.executable, "-m", "bench.eventsourcing_follower"]
        return consumer_process(arguments, {"OUTBOX_BENCH_URL": url}, handled_at, started_at)

    return consumer
