"""Leadership of one subscription: a lease row with a fencing token.

The holder id doubles as the connection's application_name, so a standby sees at once when
the leader's session is gone (kill -9, lost connection) instead of waiting for the lease to
expire. A leader that is merely paused keeps its session, and the lease expiry covers it.
"""

import os
import socket
import uuid
from dataclasses import dataclass, field
from typing import Any

import psycopg

from outbox.queries import QUERIES
from poller.positions import Position


def new_holder_id() -> str:
    # application_name is at most 63 bytes; this stays well under.
    return f"outbox-poller:{uuid.uuid4().hex[:16]}"


@dataclass(frozen=True)
class LeaseState:
    """What a renewal returns: the subscription as stored now."""

    epoch: int
    checkpoint: Position
    settings: dict[str, Any]
    replay_requests: int


@dataclass
class Lease:
    subscription_id: str
    holder: str
    ttl_seconds: float
    token: int | None = None
    host: str = field(default_factory=socket.gethostname)
    pid: int = field(default_factory=os.getpid)

    def _params(self) -> dict[str, Any]:
        return {
            "subscription": self.subscription_id,
            "holder": self.holder,
            "host": self.host,
            "pid": self.pid,
            "ttl_seconds": self.ttl_seconds,
            "token": self.token,
        }

    async def try_acquire(self, conn: psycopg.AsyncConnection[Any]) -> bool:
        cursor = await conn.execute(QUERIES["acquire_leadership"], self._params())
        row = await cursor.fetchone()
        self.token = None if row is None else int(row[0])
        return self.token is not None

    async def renew(self, conn: psycopg.AsyncConnection[Any]) -> LeaseState | None:
        """None when another process took the lease over."""
        cursor = await conn.execute(QUERIES["renew_leadership"], self._params())
        row = await cursor.fetchone()
        if row is None:
            return None
        epoch, transaction_id, position, settings, replay_requests = row
        return LeaseState(epoch, Position(transaction_id, position), settings, replay_requests)

    async def release(self, conn: psycopg.AsyncConnection[Any]) -> None:
        await conn.execute(QUERIES["release_leadership"], self._params())
