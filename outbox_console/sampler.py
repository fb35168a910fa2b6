"""What the overview shows, read every `interval` seconds on one connection of its own, so
the pages cost the database the same however many browsers watch them, and the history the
charts draw (the last hour, in this process's memory: see history.py).

The delivery rate is what the checkpoints passed between two samples: for each shard whose
checkpoint moved forward, the messages of that shard between its two places, over the time
between the samples. It needs a role that may read messages (the count is of rows of
outbox.messages); for one that may not, the rate is unknown. Counting costs an index range
scan of what was delivered meanwhile, hashing each key of a sharded subscription.

With a read replica (`outbox console --read-database-url`), each sample also asks it how far
behind the database it is (a short connection of its own); a replica that cannot be reached
says so in the overview and fails nothing else.

A sample that fails is tried again under the daemon's reconnect policy (poller/reconnect.py:
its backoff, from 50 ms doubling with jitter, here up to the interval), so the overview is
back within a moment of the database's return.
"""

import asyncio
import datetime
import logging
import time
from collections.abc import Callable
from typing import Any, NamedTuple

import psycopg
from starlette.concurrency import run_in_threadpool

from outbox.database_url import mask_password
from outbox.positions import Position
from outbox_console.database import APPLICATION_NAME, connect
from outbox_console.history import History, Point, ShardPlace, passed_between
from poller import operations
from poller.reconnect import LONGEST_DELAY, Backoff
from poller.waits import wait_event

log = logging.getLogger(__name__)


class Overview(NamedTuple):
    taken_at: datetime.datetime
    privileges: operations.Privileges
    statuses: list[operations.SubscriptionStatus]
    rates: dict[str, float | None]
    """Messages a second each subscription's checkpoints passed since the sample before."""
    holders: list[operations.RetentionHolder]
    publications: list[str]
    read_replica: operations.ReadReplica | None = None
    """None when the console was given no read replica."""


class Sampler:
    def __init__(
        self,
        database_url: str,
        interval: float,
        history: History,
        clock: Callable[[], float] = time.time,
        *,
        read_url: str | None = None,
    ) -> None:
        self.interval = interval
        self.history = history
        self.latest: Overview | None = None
        self.failure: str | None = None
        """Why the last sample failed (the database's error, password masked), if it did."""
        self._url = database_url
        self._clock = clock
        self._conn: psycopg.Connection[Any] | None = None
        self._read_url = read_url
        self._checkpoints: dict[ShardPlace, Position] = {}
        self._sampled_at: float | None = None
        self._failures = Backoff(longest=min(LONGEST_DELAY, interval))

    def sample(self) -> Overview:
        """Read the overview once, add it to the history, and keep it as `latest`."""
        try:
            overview = self._read(self._connection())
        except BaseException:
            self.close()
            raise
        self.latest = overview
        return overview

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    async def run(self, stop: asyncio.Event) -> None:
        """Sample every `interval` seconds until `stop` is set; a failure is said once (at
        WARNING) and its end too (at INFO), and the overview says it meanwhile."""
        try:
            while not stop.is_set():
                pause = self.interval
                try:
                    await run_in_threadpool(self.sample)
                except (psycopg.Error, OSError) as error:
                    failure = mask_password(str(error).strip().splitlines()[0])
                    if self.failure is None:
                        log.warning("the console cannot read the database: %s", failure)
                    self.failure = failure
                    pause = self._failures.failed(time.monotonic())
                except Exception as error:  # a bug: say it, and keep the pages answering
                    log.error("the console's sampler failed; it tries again", exc_info=error)
                    self.failure = mask_password(f"unexpected {type(error).__name__}: {error}")
                    pause = self._failures.failed(time.monotonic())
                else:
                    if self.failure is not None:
                        log.info("the console reads the database again")
                    self.failure = None
                    self._failures.succeeded(time.monotonic())
                await wait_event(stop, pause)
        finally:
            self.close()

    def _connection(self) -> psycopg.Connection[Any]:
        if self._conn is None or self._conn.closed:
            self._conn = connect(self._url, autocommit=True)
        return self._conn

    def _read(self, conn: psycopg.Connection[Any]) -> Overview:
        privileges = operations.privileges(conn)
        # With each blocker's SQL (redacted by the view): a page shows it only to a signed-in
        # visitor, and only for sessions in this database (reading_pages._blocker_query).
        statuses = operations.status(conn, show_query=True)
        holders = operations.retention_holders(conn)
        publications = operations.publications(conn, with_messages=privileges.reads_messages)
        checkpoints = {
            ShardPlace(shard.subscription, shard.unit): shard.checkpoint
            for shard in operations.shard_checkpoints(conn)
        }
        now = self._clock()
        rates = self._rates(conn, statuses, checkpoints, now, privileges.reads_messages)
        self._checkpoints, self._sampled_at = checkpoints, now
        for row in statuses:
            behind = None if row.kind is not None else row.messages_behind
            self.history.add(row.subscription, Point(now, behind, rates[row.subscription]))
        self.history.keep_only(rates)
        taken_at = datetime.datetime.fromtimestamp(now, datetime.UTC)
        replica = None
        if self._read_url is not None:
            replica = operations.read_replica(conn, self._read_url, statuses, APPLICATION_NAME)
        return Overview(taken_at, privileges, statuses, rates, holders, publications, replica)

    def _rates(
        self,
        conn: psycopg.Connection[Any],
        statuses: list[operations.SubscriptionStatus],
        checkpoints: dict[ShardPlace, Position],
        now: float,
        counts_messages: bool,
    ) -> dict[str, float | None]:
        rates: dict[str, float | None] = {row.subscription: None for row in statuses}
        if not counts_messages or self._sampled_at is None or now <= self._sampled_at:
            return rates
        publication = {row.subscription: row.publication for row in statuses}
        passed: dict[str, int] = dict.fromkeys(publication, 0)
        for place, before, after in passed_between(self._checkpoints, checkpoints):
            if place.subscription in publication:
                passed[place.subscription] += operations.messages_between(
                    conn, publication[place.subscription], before, after, place.unit
                )
        elapsed = now - self._sampled_at
        for name, count in passed.items():
            rates[name] = count / elapsed
        return rates
