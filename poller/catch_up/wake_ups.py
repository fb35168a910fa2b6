"""Early wake-ups for one subscription from NOTIFY (writers that append with `notify=True`).

Its own LISTEN connection (poller/listening.py), so a read never waits behind it. It only
shortens waits: the live phase also reads every poll interval, so a lost LISTEN connection
costs latency, not messages; it is logged and opened again.
"""

import asyncio
import contextlib
from types import TracebackType

from poller.listening import listen
from poller.waits import wait_event


class WakeUps:
    def __init__(self, url: str, publication: str) -> None:
        self._url = url
        self._publication = publication
        self._event = asyncio.Event()
        self._listener: asyncio.Task[None] | None = None

    async def __aenter__(self) -> "WakeUps":
        self._listener = asyncio.create_task(
            listen(self._url, "outbox-poller:subscribe-listen", self._heard),
            name="outbox-subscribe-listen",
        )
        return self

    async def __aexit__(
        self,
        error_type: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._listener is not None:
            self._listener.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._listener

    async def wait(self, timeout: float) -> None:
        """Until a NOTIFY for the publication arrives, or `timeout` seconds."""
        await wait_event(self._event, timeout)
        self._event.clear()

    def _heard(self, publication: str) -> None:
        if publication == self._publication:
            self._event.set()
