"""Daemons in child processes of their own, as `outbox poll` runs them, reporting what their
handlers handled.

In one process every plain `def` handler thread shares one GIL, so a handler that computes
gets one core however many shards that process leads: spreading a subscription's shards over
processes is what buys the others. Each child here runs a `DaemonThread` on one subscription
with a handler that burns a fixed amount of CPU-bound Python, then notes the message id and
the time it finished; asked over its pipe, it sends what it noted since the last ask.

One clock for all: time.monotonic() is CLOCK_MONOTONIC on Linux, counted from boot for the
whole machine, so the children's times and the parent's compare (as in bench/load_bench.py).
"""

import collections
import contextlib
import multiprocessing
import threading
import time
from collections.abc import Iterator
from multiprocessing.connection import Connection as Pipe
from multiprocessing.context import ForkServerContext

from poller.daemon import garbage_collection
from poller.daemon.background import DaemonThread
from poller.message import Message

Handled = list[tuple[str, float]]  # (message id, monotonic time its handler returned)

_REPORT = "report"
_STOP = "stop"


def burn(iterations: int) -> int:
    """CPU-bound Python: holds the GIL throughout, as a handler that computes does."""
    total = 0
    for n in range(iterations):
        total += n * n
    return total


def iterations_for(seconds: float) -> int:
    """How many `burn` iterations take `seconds` on this machine (the fastest of five
    tries of a longer run, so a scheduling hiccup does not inflate the work)."""
    sample = 200_000
    fastest = min(_timed(sample) for _ in range(5))
    return max(1, round(sample * seconds / fastest))


def _timed(iterations: int) -> float:
    started = time.perf_counter()
    burn(iterations)
    return time.perf_counter() - started


def _child(url: str, subscription: str, iterations: int, commands: Pipe) -> None:
    garbage_collection.set_for_daemon()  # as `outbox poll` sets up its process
    # deque.append and popleft are atomic: handler threads append, this thread takes.
    noted: collections.deque[tuple[str, float]] = collections.deque()

    def handle(message: Message) -> None:
        burn(iterations)
        noted.append((message.message_id, time.monotonic()))

    def taken() -> Handled:
        return [noted.popleft() for _ in range(len(noted))]

    with DaemonThread(url, [subscription], handle):
        commands.send(_REPORT)  # started
        while commands.recv() == _REPORT:
            commands.send(taken())
    commands.send(taken())


class DaemonProcesses:
    """`count` children, each running the daemon on `subscription` with a handler burning
    `iterations` (see `burn`); `handled` (given, or a new dict) collects what they report,
    by message id (the first time each was handled). Use as a context manager: on the way out
    every child stops as on SIGTERM and reports the rest; `repeated` counts the handler calls
    on a message handled before (a redelivery)."""

    def __init__(
        self,
        url: str,
        subscription: str,
        count: int,
        iterations: int = 0,
        handled: dict[str, float] | None = None,
    ) -> None:
        context = multiprocessing.get_context("forkserver")
        assert isinstance(context, ForkServerContext)
        # Imported once in the fork server: the children start by fork, not by importing the
        # daemon afresh on a machine whose cores the running ones need.
        context.set_forkserver_preload([__name__])
        self.handled = {} if handled is None else handled
        self.repeated = 0
        self._lock = threading.Lock()
        self._pipes: list[Pipe] = []
        self._child_ends: list[Pipe] = []
        self._processes = []
        for _ in range(count):
            parent, child = context.Pipe()
            arguments = (url, subscription, iterations, child)
            self._processes.append(context.Process(target=_child, args=arguments))
            self._pipes.append(parent)
            self._child_ends.append(child)

    @property
    def pids(self) -> set[int]:
        return {process.pid for process in self._processes if process.pid is not None}

    def collect(self) -> int:
        """Ask every child for what it handled since the last ask; how many were handled."""
        with self._lock:  # one exchange per pipe at a time
            for pipe in self._pipes:
                pipe.send(_REPORT)
            for pipe in self._pipes:
                self._note(pipe.recv())
            return len(self.handled)

    def _note(self, handled: Handled) -> None:
        for message_id, at in handled:
            if message_id in self.handled:
                self.repeated += 1
            else:
                self.handled[message_id] = at

    def __enter__(self) -> "DaemonProcesses":
        for process in self._processes:
            process.start()
        for child in self._child_ends:
            # Only the child may hold its end: a child that dies then reads as EOFError here
            # instead of leaving the parent waiting for its answer forever.
            child.close()
        for pipe in self._pipes:
            pipe.recv()  # started
        return self

    def __exit__(self, *_: object) -> None:
        with self._lock:
            for pipe in self._pipes:
                with contextlib.suppress(OSError):  # that child is gone already
                    pipe.send(_STOP)
            for pipe in self._pipes:
                with contextlib.suppress(EOFError):
                    self._note(pipe.recv())
        for process in self._processes:
            process.join(timeout=60)
            if process.is_alive():
                process.kill()


@contextlib.contextmanager
def collecting(processes: DaemonProcesses, every: float = 0.01) -> Iterator[None]:
    """Collect in a background thread every `every` seconds while the block runs, so
    `processes.handled` fills as the messages are handled (bench/load_bench.py waits on it)."""
    stop = threading.Event()

    def collect() -> None:
        while not stop.wait(every):
            processes.collect()

    thread = threading.Thread(target=collect, name="collect-handled")
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
