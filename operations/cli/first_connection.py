"""`outbox poll`'s first connection, retried while the server is down or starting.

A daemon is often started next to its database (compose, systemd, a pod): the server may not
accept connections yet, and waiting is what the daemon does for every later connection too.
Only failures that waiting can end are retried; a URL that cannot be parsed, a refused login,
a missing role or database fail at once, since retrying them only hides the mistake.
"""

import logging
from typing import Any

import psycopg
from tenacity import Retrying, retry_if_exception, wait_exponential_jitter

from operations.cli.context import CommandContext
from operations.cli.errors import DatabaseConnectionError

log = logging.getLogger(__name__)

# libpq does not give connection failures an SQLSTATE, so they are told apart by its wording.
TRANSIENT_FAILURES = (
    "connection refused",
    "timeout expired",
    "the database system is starting up",
    "the database system is shutting down",
    "the database system is in recovery mode",
    "too many clients",
    "remaining connection slots are reserved",
    "no such file or directory",  # the Unix socket of a server that is not up yet
    "server closed the connection unexpectedly",
    "network is unreachable",
    "no route to host",
    "failed to resolve host",  # DNS of a service that is still being created
    "could not translate host name",
)


def is_transient(error: BaseException) -> bool:
    cause = error.cause if isinstance(error, DatabaseConnectionError) else error
    if not isinstance(cause, psycopg.OperationalError):
        return False
    text = str(cause).lower()
    return any(failure in text for failure in TRANSIENT_FAILURES)


def connect_when_up(context: CommandContext) -> psycopg.Connection[Any]:
    for attempt in Retrying(
        retry=retry_if_exception(is_transient),
        wait=wait_exponential_jitter(initial=0.1, max=5),
        before_sleep=lambda state: log.warning(
            "%s; retrying", state.outcome and state.outcome.exception()
        ),
        reraise=True,
    ):
        with attempt:
            return context.connect()
    raise AssertionError("unreachable: Retrying retries until it returns or re-raises")
