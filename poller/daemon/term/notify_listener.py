"""Early wake-ups from NOTIFY, for writers that opt into `notify=True`.

One LISTEN connection per process serves every subscription (poller/listening.py). It only
shortens waits: if it is down, adaptive polling still finds every message, so its failures are
logged, not fatal.
"""

import asyncio
from collections import defaultdict

from poller.listening import listen
from poller.waits import wait_event


class NotifyListener:
    """Per-publication wake-up events, set by NOTIFY and awaited by the readers."""

    def __init__(self) -> None:
        self._events: defaultdict[str, asyncio.Event] = defaultdict(asyncio.Event)

    async def wait(self, publication: str, timeout: float) -> None:
        event = self._events[publication]
        await wait_event(event, timeout)
        event.clear()

    def wake(self, publication: str) -> None:
        self._events[publication].set()

    async def listen(self, database_url: str) -> None:
        """Run until cancelled, reconnecting under the one reconnect policy."""
        await listen(database_url, "outbox-poller:listen", self.wake)
