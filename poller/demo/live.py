"""The demo's daemon: a counting handler and a daemon thread that stops on request."""

import asyncio
import threading
from collections import Counter

from poller.daemon.options import DaemonOptions
from poller.daemon.runner import run_daemon
from poller.message import Message


class CountingHandler:
    """Counts deliveries per position (a duplicate shows as a count above one)."""

    def __init__(self) -> None:
        self.delivered: Counter[int] = Counter()
        self._lock = threading.Lock()

    def __call__(self, message: Message) -> None:
        with self._lock:
            self.delivered[message.position] += 1

    def snapshot(self) -> Counter[int]:
        with self._lock:
            return Counter(self.delivered)


class DaemonThread:
    def __init__(self, database_url: str, subscription: str, handler: CountingHandler) -> None:
        self._loop = asyncio.new_event_loop()
        self._stop = asyncio.Event()
        options = DaemonOptions(lease_seconds=2.0, renew_every=0.5)
        self._thread = threading.Thread(
            target=self._loop.run_until_complete,
            args=(run_daemon(database_url, [subscription], handler, options, self._stop),),
            daemon=True,
        )

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(timeout=30)
