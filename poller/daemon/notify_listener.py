"""Early wake-ups from NOTIFY, for writers that opt into `notify=True`.

One LISTEN connection per process serves every subscription. It only shortens waits: if it is
down, adaptive polling still finds every message, so its failures are logged, not fatal.
"""

import asyncio
import logging
from collections import defaultdict
from typing import Any

import psycopg
from psycopg import sql
from tenacity import AsyncRetrying, retry_if_exception_type, wait_exponential_jitter

from outbox.names import NOTIFY_CHANNEL
from poller.waits import wait_event

log = logging.getLogger(__name__)


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
        """Run until cancelled, reconnecting with backoff."""
        async for attempt in AsyncRetrying(
            retry=retry_if_exception_type(psycopg.OperationalError),
            wait=wait_exponential_jitter(multiplier=0.1, max=5),
            before_sleep=lambda _: log.info("LISTEN connection lost; reconnecting"),
        ):
            with attempt:
                await self._listen_once(database_url)

    async def _listen_once(self, database_url: str) -> None:
        conn: psycopg.AsyncConnection[Any] = await psycopg.AsyncConnection.connect(
            database_url, autocommit=True, application_name="outbox-poller:listen"
        )
        async with conn:
            await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(NOTIFY_CHANNEL)))
            async for notify in conn.notifies():
                self.wake(notify.payload)
