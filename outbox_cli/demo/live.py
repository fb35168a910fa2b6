"""The demo's handler: it counts deliveries, so duplicates and losses show."""

import threading
from collections import Counter

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
