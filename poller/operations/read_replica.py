"""The read replica the daemons read messages from, as an operator's front end shows it: how
far behind the database it is and which subscriptions wait for its replay, or why it cannot
serve (the daemons refuse it, or it cannot be reached). One short connection each time, as a
metrics scrape makes: a replica that is down fails nothing else."""

from typing import Any, NamedTuple

import psycopg

from outbox.database_url import mask_password
from poller.inspection import SubscriptionStatus, read_server
from poller.reconnect import failure_line
from poller.store.read_server_check import ReadServerStatus

# libpq's smallest connect timeout: a status or a page must not hang on a replica that is gone.
CONNECT_TIMEOUT_SECONDS = 2


class ReadReplica(NamedTuple):
    masked_url: str
    status: ReadServerStatus | None
    unreachable: str | None
    """Why it could not be asked (then `status` is None), password masked."""


def read_replica(
    conn: psycopg.Connection[Any],
    read_url: str,
    rows: list[SubscriptionStatus],
    application_name: str,
) -> ReadReplica:
    """`read_url`'s server against `conn`'s, for the subscriptions of `rows` (`status`)."""
    masked = mask_password(read_url)
    try:
        with psycopg.connect(
            read_url,
            autocommit=True,
            connect_timeout=CONNECT_TIMEOUT_SECONDS,
            application_name=application_name,
        ) as read_conn:
            return ReadReplica(masked, read_server(conn, read_conn, rows), None)
    except psycopg.Error as error:
        return ReadReplica(masked, None, failure_line(error))
