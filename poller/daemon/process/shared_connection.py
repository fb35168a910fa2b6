"""One connection that a subscription's tasks in a process take turns on.

A process holds a fixed number of connections per subscription, however many shards it leads
(subscription_connections.py): to the database for its shards' writes, one for reads (the
shards' shared read, see shared_reads.py) and the lease renewer's, plus the process's LISTEN
connection.
psycopg serialises the statements of tasks sharing an async connection, and each of these
statements is a transaction of its own (autocommit): none may open a transaction block on it,
which would take the other tasks' statements in (see LeaderStore.finish_shard_change).

A statement that finds the connection gone raises in the task that sent it (its term ends as
for any lost connection); the next `get` sees it closed and opens another under the one
reconnect policy (poller/reconnect.py), once for every task waiting. It opens it at once,
without the policy's wait for a lost connection: every task that finds one lost (a shard's
worker, the lease renewer, the coordinator) backs off itself before it asks again, and the
two waits stacked made one loss wait two backoffs. An attempt that fails is retried with the
policy's backoff as ever.

One loss often takes every session of the process (a server restart, an operator terminating
them): the connections of a group (a subscription's, in one process) each run an empty
statement before their next use once one of them is found lost, so such a loss ends one term,
not one after another as each dead connection is found in turn.
"""

import asyncio
import contextlib
from typing import Any

import psycopg

from poller.reconnect import Reconnector
from poller.waits import unless_stopped

Connection = psycopg.AsyncConnection[Any]


class ConnectionGroup:
    """Connections lost together, as far as anyone can tell: see the module's docstring."""

    def __init__(self) -> None:
        self.members: list[SharedConnection] = []
        self.reopened = 0

    def losses(self) -> int:
        """Changes when a member is found lost, not when it is opened again: reopened ones
        plus those closed now."""
        return self.reopened + sum(member.lost for member in self.members)


class SharedConnection:
    def __init__(self, connections: Reconnector, group: ConnectionGroup | None = None) -> None:
        self._connections = connections
        self._conn: Connection | None = None
        self._opening = asyncio.Lock()
        self._group = group or ConnectionGroup()
        self._group.members.append(self)
        self._losses_seen = 0

    @property
    def lost(self) -> bool:
        """Found closed by a statement, and not opened again yet."""
        return self._conn is not None and self._conn.closed

    async def get(self, stop: asyncio.Event) -> Connection:
        """The open connection, reopened when it was lost; Stopped once `stop` is set (one
        shard's stop gives up its own wait, not another task's)."""
        return await unless_stopped(self._open(), stop)

    async def _open(self) -> Connection:
        async with self._opening:
            conn = self._conn
            if conn is not None and not conn.closed and self._group.losses() != self._losses_seen:
                with contextlib.suppress(psycopg.OperationalError):
                    await conn.execute("")  # closes it when the server has dropped it
            if conn is None or conn.closed:
                if conn is not None:
                    self._group.reopened += 1
                conn = self._conn = await self._connections.connect()
            self._losses_seen = self._group.losses()
            return conn

    async def open_alone(self) -> Connection:
        """A connection of the caller's own, to the same server under the same name, for a
        transaction block; one attempt, the caller closes it."""
        return await self._connections.open_once()

    async def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(psycopg.Error):
                await conn.close()
