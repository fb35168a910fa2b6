"""Running a named query on whatever connection the caller holds.

The caller owns the transaction: nothing here commits or rolls back. SQLAlchemy connections
must use the psycopg driver, because the queries use psycopg's %(name)s placeholders and are
handed to the driver unchanged (`exec_driver_sql`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, LiteralString, TypeAlias

import psycopg

from outbox.errors import UnsupportedConnectionError

if TYPE_CHECKING:
    # SQLAlchemy is imported only when a SQLAlchemy connection shows up: applications (and the
    # poller daemon) that use psycopg alone do not pay for importing it.
    from sqlalchemy import Connection as AlchemyConnection
    from sqlalchemy.ext.asyncio import AsyncConnection as AlchemyAsyncConnection
    from sqlalchemy.ext.asyncio import AsyncSession
    from sqlalchemy.orm import Session

SyncConnection: TypeAlias = "psycopg.Connection[Any] | AlchemyConnection | Session"
AsyncConnection: TypeAlias = "psycopg.AsyncConnection[Any] | AlchemyAsyncConnection | AsyncSession"
Rows = list[tuple[Any, ...]]


def _check_driver(driver: str) -> None:
    if driver != "psycopg":
        raise UnsupportedConnectionError(
            f"SQLAlchemy driver {driver!r} is not supported; use a postgresql+psycopg:// URL"
        )


def fetch_all(conn: SyncConnection, query: LiteralString, params: Mapping[str, Any]) -> Rows:
    if isinstance(conn, psycopg.Connection):
        # conn.execute rather than a cursor block, and rownumber rather than description (which
        # builds a Column per column on every call): the writer runs this once per append.
        cursor = conn.execute(query, params)
        return cursor.fetchall() if cursor.rownumber is not None else []
    from sqlalchemy import Connection as AlchemyConnection
    from sqlalchemy.orm import Session

    if isinstance(conn, Session):
        conn = conn.connection()
    if isinstance(conn, AlchemyConnection):
        _check_driver(conn.dialect.driver)
        result = conn.exec_driver_sql(query, dict(params))
        return [tuple(row) for row in result.all()] if result.returns_rows else []
    raise UnsupportedConnectionError(_unsupported(conn, "a synchronous"))


async def fetch_all_async(
    conn: AsyncConnection, query: LiteralString, params: Mapping[str, Any]
) -> Rows:
    if isinstance(conn, psycopg.AsyncConnection):
        cursor = await conn.execute(query, params)
        return await cursor.fetchall() if cursor.rownumber is not None else []
    from sqlalchemy.ext.asyncio import AsyncConnection as AlchemyAsyncConnection
    from sqlalchemy.ext.asyncio import AsyncSession

    if isinstance(conn, AsyncSession):
        conn = await conn.connection()
    if isinstance(conn, AlchemyAsyncConnection):
        _check_driver(conn.dialect.driver)
        result = await conn.exec_driver_sql(query, dict(params))
        return [tuple(row) for row in result.all()] if result.returns_rows else []
    raise UnsupportedConnectionError(_unsupported(conn, "an asynchronous"))


def _unsupported(conn: object, kind: str) -> str:
    from sqlalchemy import Connection as AlchemyConnection
    from sqlalchemy.ext.asyncio import AsyncConnection as AlchemyAsyncConnection
    from sqlalchemy.ext.asyncio import AsyncSession
    from sqlalchemy.orm import Session

    hint = ""
    if isinstance(conn, psycopg.AsyncConnection | AlchemyAsyncConnection | AsyncSession):
        hint = "; use the *_async functions for asynchronous connections"
    elif isinstance(conn, psycopg.Connection | AlchemyConnection | Session):
        hint = "; use append/append_many for synchronous connections"
    return f"expected {kind} psycopg or SQLAlchemy connection, got {type(conn).__name__}{hint}"
