"""Early wake-ups for one subscription from NOTIFY (writers that append with `notify=True`).

Its own LISTEN connection, so a read never waits behind it. It only shortens waits: the live
phase also reads every poll interval, so a lost LISTEN connection costs latency, not messages;
it is logged and opened again.
"""

import asyncio
import contextlib
import logging
from types import TracebackType
from typing import Any

import psycopg
from psycopg import sql

from outbox.names import NOTIFY_CHANNEL
from poller.waits import wait_event

log = logging.getLogger(__name__)

# Pause before opening a lost LISTEN connection again; polling covers the gap.
RECONNECT_PAUSE = 1.0


class WakeUps:
    def __init__(self, url: str, publication: str) -> None:
        self._url = url
        self._publication = publication
        self._event = asyncio.Event()
        self._listener: asyncio.Task[None] | None = None

    async def __aenter__(self) -> "WakeUps":
        self._listener = asyncio.create_task(self._listen(), name="outbox-subscribe-listen")
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

    async def _listen(self) -> None:
        while True:
            try:
                await self._listen_once()
            except psycopg.OperationalError as error:
                log.info("LISTEN connection lost (%s); polling until it is back", error)
                await asyncio.sleep(RECONNECT_PAUSE)

    async def _listen_once(self) -> None:
        conn: psycopg.AsyncConnection[Any] = await psycopg.AsyncConnection.connect(
            self._url, autocommit=True, application_name="outbox-poller:subscribe-listen"
        )
        async with conn:
            await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(NOTIFY_CHANNEL)))
            async for notify in conn.notifies():
                if notify.payload == self._publication:
                    self._event.set()
