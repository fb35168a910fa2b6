"""A query reading from a hot standby (`readUrl`, `readUrlEnv`, `readUrlFile`): batch ends,
split points and slices come from the standby, the subscription row stays on the database.

The driver checks that the read server is a standby of the database, or the database itself
(outbox/read_servers.py says why nothing else is safe), when it connects to it; from then on
each statement that chooses a batch end proves it again (a ReadProof: a standby promoted
since would count transactions still open on the primary as ended, and end a batch past
them). A batch end chosen there is below that server's frontier; an executor's server may
have replayed less (another standby, or the same one restarted), and would return a slice
with rows missing. So each slice first waits, on its own connection, until its server's
frontier is past the slice's end (a standby's only moves forward while a connection lasts),
checked in the statement that also says where the server stands: a promoted copy's frontier
says nothing of the primary's rows (its own transactions carry it on), so it is refused
there. A standby that passes had replayed every row of the slice as the primary committed it,
and keeps them whatever becomes of it; the slice's COPY reads them next, on the same
connection. A server not in recovery passes at once, whatever the slice's end (a batch end is
never past the primary's frontier; a promoted copy fails the proof in the same statement), and
a slice read from the database itself (no readUrl, so no proof) runs no check at all.
"""

import logging
import time
from collections.abc import Callable
from typing import Any

import psycopg
from psycopg import sql

from outbox.positions import Position
from outbox.read_servers import ReadProof, ServerState, check_read_server, refusal, server_state
from outbox_spark.options import DatabaseLocation
from outbox_spark.queries import spark_queries

log = logging.getLogger(__name__)

REPLAY_PATIENCE = 60.0
"""Seconds a slice waits for its server's replay before its task fails (and Spark retries
it, up to spark.task.maxFailures)."""
_RECHECK_EVERY = 0.05


class ReplicaBehindError(RuntimeError):
    """The slice's server has not replayed up to the slice's end within REPLAY_PATIENCE."""


def check_reads(
    read_conn: psycopg.Connection[Any], conn: psycopg.Connection[Any], reads: DatabaseLocation
) -> ReadProof:
    """Raises ReadServerRefusedError unless `read_conn`'s server may serve the reads of
    `conn`'s database; else what each read there proves from then on."""
    read = server_state(read_conn)
    return check_read_server(read, server_state(conn), f"given by option {reads.option}")


def replayed_statement(until: Position) -> sql.Composed:
    """The replay check with the slice's end as a literal (ADBC runs it without parameters)."""
    return sql.SQL(spark_queries()["spark_replayed_past"]).format(
        until_transaction_id=sql.Literal(str(until.transaction_id))
    )


def replayed_past(row: tuple[Any, ...] | None, proof: ReadProof | None) -> bool:
    """The replay check's answer (its row); raises ReadServerRefusedError when the server,
    as the same statement saw it, fails `proof` (None: the slice is read from the database)."""
    assert row is not None  # a SELECT without FROM always returns its one row
    if proof is not None:
        server = ServerState.from_row(row[1:])
        if refusal(server, proof.primary) is not None:
            raise proof.refused(server)
    return bool(row[0])


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
