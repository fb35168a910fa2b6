"""When each message was handled, from a consumer in a process of its own (`outbox poll` as a
user starts it, eventsourcing's follower), to the bench that started it.

In the consumer's process, `record` notes (message id, time.monotonic()) in a list, and a
thread writes what was noted to the file named by OUTBOX_BENCH_HANDLED every 10 ms, one
"id time" line each: the handler pays a list append, not a write per message. The bench
reads the file as it grows (`HandledFile.take`). time.monotonic() is CLOCK_MONOTONIC on Linux,
counted from boot for the whole machine, so the times compare with the bench's and the
writers' (as in bench/load_bench.py).
"""

import atexit
import collections
import os
import threading
import time
from pathlib import Path

from poller.message import Message

VARIABLE = "OUTBOX_BENCH_HANDLED"
FLUSH_EVERY = 0.01

# deque.append and popleft are atomic: handler threads append, the flushing thread takes.
_noted: collections.deque[tuple[str, float]] = collections.deque()
_started = threading.Lock()
_flusher: threading.Thread | None = None


def record(message: Message) -> None:
    """A plain `def` handler for `outbox poll --handler bench.handled_times:record`."""
    _noted.append((message.message_id, time.monotonic()))
    if _flusher is None:
        start_flushing()


def note(message_id: str) -> None:
    """The same, for a consumer that is not the daemon's handler."""
    _noted.append((message_id, time.monotonic()))
    if _flusher is None:
        start_flushing()


def start_flushing() -> None:
    """Write what is noted to $OUTBOX_BENCH_HANDLED every 10 ms until the process exits."""
    global _flusher  # one flusher per process
    with _started:
        if _flusher is not None:
            return
        path = Path(os.environ[VARIABLE])
        _flusher = threading.Thread(target=_flush_forever, args=(path,), daemon=True)
        _flusher.start()
        atexit.register(_flush, path)


def _flush_forever(path: Path) -> None:
    while True:
        time.sleep(FLUSH_EVERY)
        _flush(path)


def _flush(path: Path) -> None:
    taken = [_noted.popleft() for _ in range(len(_noted))]
    if taken:
        with path.open("ab") as file:
            file.write("".join(f"{message_id} {at!r}\n" for message_id, at in taken).encode())


class HandledFile:
    """The bench's end: what the consumer's process wrote so far, by message id."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._read = 0
        self._partial = b""

    def take(self, handled_at: dict[str, float]) -> None:
        """Add the lines written since the last call to `handled_at` (the first time each
        id was handled)."""
        if not self.path.exists():
            return
        with self.path.open("rb") as file:
            file.seek(self._read)
            data = file.read()
            self._read = file.tell()
        lines = (self._partial + data).split(b"\n")
        self._partial = lines.pop()  # a line still being written
        for line in lines:
            message_id, at = line.decode().rsplit(" ", 1)
            handled_at.setdefault(message_id, float(at))
