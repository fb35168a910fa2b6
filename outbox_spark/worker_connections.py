"""ADBC connections an executor's Python worker keeps from one task to the next.

Opening one costs about 40 ms here (the driver loads PostgreSQL's type catalog on connect),
which every task of every trigger of a running stream would pay, and the server with it.
Spark reuses Python workers (`spark.python.worker.reuse`, on by default), so a worker keeps
one idle connection per database and hands it to its next task. Idle means no transaction
(autocommit), so a kept connection holds back no snapshot, no frontier and no retention.

Only a connection whose read ended cleanly is kept: one that failed, or whose COPY was
cancelled because Spark stopped reading, is closed. A kept connection may have died since
(a restart, a terminated backend, an idle timeout), so it is checked with a round trip
before it is handed out, and replaced if it does not answer.
"""

import atexit
import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING

import psycopg

if TYPE_CHECKING:  # ADBC is optional: imported only where it is used
    from adbc_driver_manager.dbapi import Connection

_idle: dict[str, "Connection"] = {}


@atexit.register
def _close_idle() -> None:
    # Before the interpreter tears modules down: ADBC's finalizer cannot run after that.
    while _idle:
        _, connection = _idle.popitem()
        with contextlib.suppress(Exception):
            connection.close()


@contextlib.contextmanager
def adbc_connection(conninfo: str, application_name: str) -> Iterator["Connection"]:
    """A live autocommit connection to `conninfo`, kept for the next task if the block ends
    without an exception (GeneratorExit included)."""
    connection = _take_idle(conninfo)
    if connection is None:
        import adbc_driver_postgresql.dbapi as adbc

        connection = adbc.connect(
            psycopg.conninfo.make_conninfo(conninfo, application_name=application_name),
            autocommit=True,
        )
    try:
        yield connection
    except BaseException:
        connection.close()
        raise
    previous = _idle.pop(conninfo, None)
    if previous is not None:  # not expected: a worker runs one task at a time
        previous.close()
    _idle[conninfo] = connection


def _take_idle(conninfo: str) -> "Connection | None":
    connection = _idle.pop(conninfo, None)
    if connection is None:
        return None
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchall()
    except Exception:  # dead for any reason: the next task must not inherit the failure
        with contextlib.suppress(Exception):
            connection.close()
        return None
    return connection
