"""The console's connections: one per request, as an `outbox` command opens one (its
statements commit together when the page's work is done, or roll back when it fails, so
nothing is half-done), and the sampler's own.

None of them waits for ever on a database that stops answering: connecting gives up after
CONNECT_TIMEOUT_SECONDS, a statement (a lock it queues for included) after
STATEMENT_TIMEOUT_MILLISECONDS, and a connection whose packets go unacknowledged that long
(a network partition: TCP_USER_TIMEOUT) fails. A page then says the database failed, and the
overview how old its figures are. A server that accepts packets but never answers (stopped
with SIGSTOP) still holds a query already sent: the overview says its figures' age.
"""

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg import sql
from starlette.requests import Request

APPLICATION_NAME = "outbox-console"
CONNECT_TIMEOUT_SECONDS = 5
STATEMENT_TIMEOUT_MILLISECONDS = 10_000
# A SET rather than libpq's `options`: a pooler in front of the database (PgBouncer) refuses
# startup options it does not know.
_STATEMENT_TIMEOUT = sql.SQL("SET statement_timeout = {}").format(
    sql.Literal(STATEMENT_TIMEOUT_MILLISECONDS)
)


def connect(url: str, *, autocommit: bool = False) -> psycopg.Connection[Any]:
    conn = psycopg.connect(
        url,
        autocommit=autocommit,
        application_name=APPLICATION_NAME,
        connect_timeout=CONNECT_TIMEOUT_SECONDS,
        tcp_user_timeout=STATEMENT_TIMEOUT_MILLISECONDS,
    )
    try:
        conn.execute(_STATEMENT_TIMEOUT)
    except BaseException:
        conn.close()
        raise
    return conn


@contextmanager
def connection(request: Request) -> Iterator[psycopg.Connection[Any]]:
    url: str = request.app.state.config.database_url
    with connect(url) as conn:
        yield conn
