"""`outbox poll`'s first connection, retried while the server is down or starting.

A daemon is often started next to its database (compose, systemd, a pod): the server may not
accept connections yet, and waiting is what the daemon does for every later connection too.
It waits under the daemon's one reconnect policy (poller/reconnect.py: its backoff, its notion
of a transient failure, its way of saying so), retried by tenacity as the daemon's
connections are; only failures that waiting can end are retried: a URL that cannot be
parsed, a refused login, a missing role or database fail at once, since retrying them only
hides the mistake. Synchronous, as the checks that follow it are: `outbox poll` runs it on a
thread of its own while its probes are served, and a stop (SIGTERM) ends the wait.
"""

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg
import tenacity

from outbox_cli.context import CommandContext
from outbox_cli.errors import DatabaseConnectionError
from poller.reconnect import Backoff, BackoffWait, Outage, failure_line
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
    outage = Outage()
    retrying = tenacity.Retrying(
        retry=tenacity.retry_if_exception(is_transient),
        wait=BackoffWait(Backoff()),
        sleep=_sleep_unless_set(stop or threading.Event()),
        before_sleep=_say_failed(outage),
        reraise=True,
    )
    conn = retrying(context.connect_to, context.database_url if url is None else url)
    if (lasted := outage.ended(time.monotonic())) is not None:
        log.info("reached the database after %.1f s", lasted)
    return conn


def _sleep_unless_set(stop: threading.Event) -> Callable[[float], None]:
    def sleep(seconds: float) -> None:
        if stop.wait(seconds):
            raise StoppedWaiting

    return sleep


def _say_failed(outage: Outage) -> Callable[[tenacity.RetryCallState], None]:
    """The outage's first failure and a reminder every minute, not every attempt."""

    def say(attempt: tenacity.RetryCallState) -> None:
        outcome = attempt.outcome
        if outcome is None or (error := outcome.exception()) is None:
            return  # only failures are retried
        now = time.monotonic()
        if (said := outage.failed(now)) is not None:
            still = (
                "" if said == "first" else f" (still, after {now - (outage.began or now):.0f} s)"
            )
            log.warning("%s%s; retrying", failure_line(error), still)

    return say
