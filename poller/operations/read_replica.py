"""The read replica the daemons read messages from, as an operator's front end shows it: how
far behind the database it is and which subscriptions wait for its replay, or why it cannot
serve (the daemons refuse it, or it cannot be reached). One short connection each time, as a
metrics scrape makes: a replica that is down fails nothing else."""

from typing import Any, NamedTuple

import psycopg

from outbox.database_url import mask_password
from outbox.read_servers import ReplicaLag, server_state
from outbox.read_servers import check_read_server as refuse_unless_standby
from poller.operations.subscription_status import ReadServerStatus, SubscriptionStatus, read_server
from poller.reconnect import failure_line

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


def check_read_server(
    conn: psycopg.Connection[Any], read_conn: psycopg.Connection[Any], masked_url: str
) -> str:
    """What `outbox poll --read-database-url` checks before any read: `read_conn`'s server must
    be a hot standby of `conn`'s (ReadServerRefusedError otherwise, naming `masked_url`); how
    far behind it is, said for a log line."""
    read = server_state(read_conn)
    primary = server_state(conn)
    refuse_unless_standby(read, primary, masked_url)
    return ReplicaLag.between(read, primary).describe()
