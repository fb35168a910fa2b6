"""LISTEN for the outbox's NOTIFY channel on a connection of its own, kept open for good: one
implementation for the daemon (poller/daemon/term/notify_listener.py, one per process) and the
catch-up subscriptions (poller/catch_up/wake_ups.py, one per subscription).

NOTIFY only shortens waits: the readers also poll, so a lost LISTEN connection costs latency,
never a message. It is opened again under the one reconnect policy (poller/reconnect.py);
notifications sent while it was down are simply not heard.
"""

import logging
from collections.abc import Callable

import psycopg
from psycopg import sql

from outbox.names import NOTIFY_CHANNEL
from poller.reconnect import Reconnector, failure_line

log = logging.getLogger(__name__)


async def listen(url: str, application_name: str, heard: Callable[[str], None]) -> None:
    """Call `heard(payload)` (the publication) for each NOTIFY; runs until cancelled."""
    connections = Reconnector(url, application_name, "LISTEN connection")
    while True:
        conn = await connections.connect()
        try:
            async with conn:
                await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(NOTIFY_CHANNEL)))
                async for notify in conn.notifies():
                    heard(notify.payload)
        except psycopg.OperationalError as error:
            log.info("LISTEN connection lost (%s); polling until it is back", failure_line(error))
            connections.lost()
