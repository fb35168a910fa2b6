"""`outbox poll`'s first connection, retried while the server is down or starting.

A daemon is often started next to its database (compose, systemd, a pod): the server may not
accept connections yet, and waiting is what the daemon does for every later connection too.
It waits under the daemon's one reconnect policy (poller/reconnect.py: its backoff, its notion
of a transient failure, its way of saying so); only failures that waiting can end are
retried: a URL that cannot be parsed, a refused login, a missing role or database fail at
once, since retrying them only hides the mistake. Synchronous, as the checks that follow it
are: `outbox poll` runs it on a thread of its own while its probes are served, and a stop
(SIGTERM) ends the wait.
"""

import logging
import threading
import time
from typing import Any

import psycopg

from outbox_cli.context import CommandContext
from outbox_cli.errors import DatabaseConnectionError
from poller.reconnect import Backoff, Outage, failure_line
from poller.reconnect import is_transient as is_transient_failure

log = logging.getLogger(__name__)


def is_transient(error: BaseException) -> bool:
    cause = error.cause if isinstance(error, DatabaseConnectionError) else error
    return is_transient_failure(cause)


class StoppedWaiting(Exception):  # noqa: N818 - names what happened, not an error
    """A stop came while waiting for the database."""


def connect_when_up(
    context: CommandContext, url: str | None = None, stop: threading.Event | None = None
) -> psycopg.Connection[Any]:
    """A connection to the database, or to `url` (a hot standby of it); raises
    StoppedWaiting once `stop` is set."""
    backoff, outage = Backoff(), Outage()
    stop = stop or threading.Event()
    while True:
        try:
            conn = context.connect_to(context.database_url if url is None else url)
        except DatabaseConnectionError as error:
            if not is_transient(error):
                raise
            now = time.monotonic()
            if (said := outage.failed(now)) is not None:
                still = (
                    ""
                    if said == "first"
                    else f" (still, after {now - (outage.began or now):.0f} s)"
                )
                log.warning("%s%s; retrying", failure_line(error), still)
            if stop.wait(backoff.failed(now)):
                raise StoppedWaiting from None
            continue
        if (lasted := outage.ended(time.monotonic())) is not None:
            log.info("reached the database after %.1f s", lasted)
        return conn
