"""A query reading from a hot standby (`readUrl`, `readUrlEnv`, `readUrlFile`): batch ends,
split points and slices come from the standby, the subscription row stays on the database.

The driver checks once that the read server is a standby of the database, or the database
itself (outbox/read_servers.py says why nothing else is safe). A batch end chosen there is
below that server's frontier; an executor's server may have replayed less (another standby,
or the same one restarted), and would return a slice with rows missing. So each slice first
waits, on its own connection, until its server's frontier is past the slice's end (a
standby's only moves forward while a connection lasts), then reads. On the primary that
holds at once.
"""

import logging
import time
from collections.abc import Callable
from typing import Any

import psycopg
from psycopg import sql

from outbox.positions import Position
from outbox.read_servers import check_read_server, server_state
from outbox_spark.options import DatabaseLocation
from outbox_spark.queries import pipeline_queries

log = logging.getLogger(__name__)

REPLAY_PATIENCE = 60.0
"""Seconds a slice waits for its server's replay before its task fails (and Spark retries
it, up to spark.task.maxFailures)."""
_RECHECK_EVERY = 0.05


class ReplicaBehindError(RuntimeError):
    """The slice's server has not replayed up to the slice's end within REPLAY_PATIENCE."""


def check_reads(
    read_conn: psycopg.Connection[Any], conn: psycopg.Connection[Any], reads: DatabaseLocation
) -> None:
    """Raises ReadServerRefusedError unless `read_conn`'s server may serve the reads of
    `conn`'s database."""
    read = server_state(read_conn)
    check_read_server(read, server_state(conn), f"given by option {reads.option}")


def replayed_statement(until: Position) -> sql.Composed:
    """The replay check with the slice's end as a literal (ADBC runs it without parameters)."""
    return sql.SQL(pipeline_queries()["pipeline_replayed_past"]).format(
        until_transaction_id=sql.Literal(str(until.transaction_id))
    )


def wait_for_replay(
    replayed: Callable[[], bool],
    until: Position,
    *,
    patience: float = REPLAY_PATIENCE,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> None:
    """Return once `replayed()` (the replay check, run on the slice's connection) is true."""
    if replayed():
        return
    started = clock()
    log.warning(
        "the read server has not replayed up to the slice's end %s yet; the slice waits for"
        " it (at most %g s)",
        until,
        patience,
    )
    while not replayed():
        waited = clock() - started
        if waited >= patience:
            raise ReplicaBehindError(
                f"the read server has not replayed up to {until} after {waited:.0f} s: reading"
                " it now would miss rows of the slice (a standby lagging behind the one the"
                " batch was planned on); the task fails and Spark retries it"
            )
        sleep(_RECHECK_EVERY)
