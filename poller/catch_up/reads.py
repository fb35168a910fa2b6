"""The read connection of one subscription, opened again when it is lost.

A server restart, a failover or a terminated backend ends the connection, not the
subscription: the subscription keeps its own position, so reading again after it skips and
repeats nothing. It is opened again under the one reconnect policy (poller/reconnect.py).
Opening the first connection is not retried: the call that subscribes fails at once (a wrong
URL, a refused login, no server), and the application decides whether to wait.
"""

import logging
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Any, TypeVar

import psycopg

from outbox.positions import Position
from outbox.queries import QUERIES
from poller.message import Message
from poller.reconnect import Reconnector, failure_line
from poller.store.archived_reads import ArchivedReads, history_floor_async, read_through_archive
from poller.store.message_reads import (
    prepare_reader_async,
    safe_frontier_async,
    transaction_id_async,
)
from poller.store.retired_positions import read_batch_checked_async

log = logging.getLogger(__name__)

Result = TypeVar("Result")

APPLICATION_NAME = "outbox-poller:subscribe"


class Reads:
    def __init__(self, url: str) -> None:
        # autocommit (the policy's): each read takes a fresh snapshot, so the frontier moves.
        self._connections = Reconnector(
            url,
            APPLICATION_NAME,
            "subscription reads",
            retry_first=False,
            prepare=prepare_reader_async,
        )
        self._conn: psycopg.AsyncConnection[Any] | None = None
        self._archived: dict[str, ArchivedReads] = {}

    async def __aenter__(self) -> "Reads":
        self._conn = await self._connections.connect()
        return self

    async def __aexit__(
        self,
        error_type: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._conn is not None:
            await self._conn.close()

    async def safe_frontier(self) -> int:
        return await self._retried(safe_frontier_async)

    async def snapshot(self) -> tuple[int, int, list[int]]:
        """The safe frontier, the next transaction id, and the ids running between them."""

        async def query(conn: psycopg.AsyncConnection[Any]) -> tuple[int, int, list[int]]:
            cursor = await conn.execute(QUERIES["current_snapshot"])
            row = await cursor.fetchone()
            assert row is not None  # one row from a one-row FROM
            return row[0], row[1], list(row[2])

        return await self._retried(query)

    async def next_transaction_id(self) -> int:
        return await self._retried(lambda conn: transaction_id_async(conn, "next_transaction_id"))

    async def batch(self, publication: str, after: Position, limit: int) -> list[Message]:
        """The next rows after `after`: where retention dropped them, from the publication's
        archive (poller/store/archived_reads.py); RetiredPositionError if it has none."""
        archived = self._archived.setdefault(publication, ArchivedReads(publication))

        async def query(conn: psycopg.AsyncConnection[Any]) -> list[Message]:
            async def read_table(at: Position, rows: int) -> list[Message]:
                return await read_batch_checked_async(conn, publication, at, rows)

            messages, _ = await read_through_archive(read_table, archived, conn, after, limit)
            return messages

        return await self._retried(query)

    async def history_floor(self, publication: str) -> Position | None:
        """Where the publication's readable history begins (its archive's beginning, else
        its retired-up-to mark); None when nothing before it is gone."""

        async def query(conn: psycopg.AsyncConnection[Any]) -> Position | None:
            return await history_floor_async(conn, publication)

        return await self._retried(query)

    async def _retried(
        self, query: Callable[[psycopg.AsyncConnection[Any]], Awaitable[Result]]
    ) -> Result:
        while True:
            if self._conn is None or self._conn.closed:
                self._conn = await self._connections.connect()
            try:
                return await query(self._conn)
            except psycopg.OperationalError as error:
                log.warning("subscription read failed (%s); reconnecting", failure_line(error))
                await self._conn.close()
                self._conn = None
                self._connections.lost()
