"""One subscription in a daemon process: connect, stand by until leader, lead, repeat.

Connection loss, a PostgreSQL restart or a database failover end the current term; the worker
reconnects with exponential backoff and jitter (tenacity) and resumes from the stored
checkpoint, so nothing is lost and nothing skipped (messages handled after the last
checkpoint are delivered again: at-least-once).
"""

import asyncio
import logging
from typing import Any

import psycopg
from tenacity import AsyncRetrying, retry_if_exception_type, wait_exponential_jitter

from outbox.queries import QUERIES
from poller.daemon.handlers import HandlerCaller
from poller.daemon.leases import Lease, new_holder_id
from poller.daemon.options import DaemonOptions
from poller.daemon.session import LeaderSession, LeadershipLost
from poller.daemon.waker import Waker
from poller.subscription_records import SubscriptionRecord

log = logging.getLogger(__name__)


class SubscriptionNotFoundError(LookupError):
    pass


class SubscriptionWorker:
    def __init__(
        self,
        database_url: str,
        subscription_id: str,
        caller: HandlerCaller,
        options: DaemonOptions,
        waker: Waker,
    ) -> None:
        self._url = database_url
        self._subscription_id = subscription_id
        self._caller = caller
        self._options = options
        self._waker = waker
        self._lease = Lease(subscription_id, new_holder_id(), options.lease_seconds)

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                conn = await self._connect()
                async with conn:
                    if not await self._become_leader(conn, stop):
                        return
                    record = await self._load(conn)
                    async with await self._connect() as read_conn:
                        session = LeaderSession(
                            conn,
                            read_conn,
                            record,
                            self._lease,
                            self._caller,
                            self._options,
                            self._waker,
                            stop,
                        )
                        await session.run()
                    if not session.restart_requested:
                        return
            except LeadershipLost:
                log.warning("lost leadership of %s; standing by", self._subscription_id)
            except psycopg.OperationalError as error:
                log.warning("connection lost while leading %s: %s", self._subscription_id, error)
            if not await self._caller.wait_quiet(self._options.shutdown_timeout):
                log.warning(
                    "%s: handlers of the last term still run after %.0f s; going on",
                    self._subscription_id,
                    self._options.shutdown_timeout,
                )

    async def _connect(self) -> psycopg.AsyncConnection[Any]:
        async for attempt in AsyncRetrying(
            retry=retry_if_exception_type(psycopg.OperationalError),
            wait=wait_exponential_jitter(multiplier=0.05, max=5),
            before_sleep=lambda state: log.warning(
                "cannot reach the database (%s); retrying",
                state.outcome and state.outcome.exception(),
            ),
        ):
            with attempt:
                return await psycopg.AsyncConnection.connect(
                    self._url, autocommit=True, application_name=self._lease.holder
                )
        raise AssertionError("unreachable: AsyncRetrying retries until it returns")

    async def _become_leader(self, conn: psycopg.AsyncConnection[Any], stop: asyncio.Event) -> bool:
        announced = False
        while not stop.is_set():
            if await self._lease.try_acquire(conn):
                return True
            if not announced:
                log.info("%s has a leader; standing by", self._subscription_id)
                announced = True
            try:
                await asyncio.wait_for(stop.wait(), self._options.standby_poll)
            except TimeoutError:
                continue
        return False

    async def _load(self, conn: psycopg.AsyncConnection[Any]) -> SubscriptionRecord:
        cursor = await conn.execute(
            QUERIES["get_subscription"], {"subscription": self._subscription_id}
        )
        row = await cursor.fetchone()
        if row is None:
            raise SubscriptionNotFoundError(
                f"subscription {self._subscription_id!r} does not exist"
            )
        return SubscriptionRecord.from_row(row)
