"""One reconnect policy for every connection the daemon and the catch-up subscriptions keep.

As psycopg_pool's `AttemptWithBackoff`: the backoff is a pure object that takes the time as an
argument (`Backoff`), one function tells a failure waiting can end from one it cannot
(`is_transient`), and one async connect (`Reconnector.connect`) retries with that backoff
under tenacity (`AsyncRetrying`, the backoff as its wait: `BackoffWait`), waits through a
stop-aware sleep (`sleep_unless_stopped`) and gives up at once when its stop is set, so a
SIGTERM during an outage is never left behind a retry loop. The other retries of the library
(`outbox poll`'s first connection, a consumer's pause after a crash, the console's sampler)
wait with the same `Backoff`. What it says: the first failure of an outage
(WARNING; ERROR for a permanent one), a reminder every minute while it lasts, the recovery
(INFO); not a line per attempt.

Permanent failures (`PERMANENT_FAILURES`: a refused login, a missing role or database, a
connection setting or SSL requirement that cannot be met, a URL that cannot be parsed) end
the start of `outbox poll` (outbox_cli/first_connection.py) and the first connection of a
catch-up subscription. A daemon that is already running retries them too, at ERROR: a
password rotated or a database being restored must not end delivery for good, and nothing
else would start it again.
"""

import asyncio
import logging
import random as random_module
import time
from collections.abc import Awaitable, Callable
from typing import Any

import psycopg
import tenacity

from outbox.database_url import mask_password
from poller.waits import Stopped, unless_stopped, wait_event

log = logging.getLogger(__name__)

# Doubling from 50 ms, so a server back within a moment is reached within a moment, to 5 s,
# so a restarting server is not hammered and a subscription resumes within seconds of its
# return. Each wait is shortened by up to a quarter at random, so the many connections of
# many processes that lost the server at once do not come back in step.
FIRST_DELAY = 0.05
LONGEST_DELAY = 5.0
JITTER = 0.25
# While an outage lasts, the log says so again at this interval.
REMIND_EVERY = 60.0

# libpq gives connection failures no SQLSTATE, so they are told apart by its wording (and
# the server's, which it quotes: lc_messages must be English for these to be recognised;
# an unrecognised one counts as transient, so nothing stops for good on a wording).
PERMANENT_FAILURES = (
    "authentication failed",  # password, peer, ident, SCRAM, LDAP...
    "no password supplied",
    "password is required",
    "does not exist",  # the role or the database
    "no pg_hba.conf entry",
    "is not permitted to log in",
    "permission denied for database",
    "ssl was required",
    "does not support ssl",
    "certificate",
    "invalid ",  # a connection setting: "invalid sslmode value", "invalid integer value"...
)


def is_transient(error: BaseException) -> bool:
    """Whether waiting can end this failure to connect (or this loss of a connection): a
    server down, starting, shutting down, in recovery or full, a network that is not there
    yet, a host name not resolvable yet. A URL psycopg cannot parse is a ProgrammingError."""
    if not isinstance(error, psycopg.OperationalError):
        return False
    text = str(error).lower()
    return not any(failure in text for failure in PERMANENT_FAILURES)


def failure_line(error: BaseException) -> str:
    """A connection failure on one line, password masked (libpq's text spans lines)."""
    return " ".join(mask_password(str(error)).split())


class Backoff:
    """How long to wait before the next attempt. Pure: the time comes in as `now`.

    Each failure doubles the wait from `first` up to `longest`, shortened by up to `jitter`
    of itself at random. A success resets it only once it has lasted `lasting` seconds: a
    server that accepts a connection and drops it at once is backed off like one that
    refuses it, not retried 20 times a second.
    """

    def __init__(
        self,
        first: float = FIRST_DELAY,
        longest: float = LONGEST_DELAY,
        jitter: float = JITTER,
        random: Callable[[], float] = random_module.random,
        lasting: float | None = None,
    ) -> None:
        self._first = first
        self._longest = longest
        self._jitter = jitter
        self._random = random
        self._lasting = longest if lasting is None else lasting
        self._failures = 0
        self._succeeded_at: float | None = None

    def failed(self, now: float) -> float:
        """An attempt failed, or what the last success opened was lost: seconds to wait."""
        if self._succeeded_at is not None and now - self._succeeded_at >= self._lasting:
            self._failures = 0
        self._succeeded_at = None
        delay = min(self._first * 2.0 ** min(self._failures, 64), self._longest)
        self._failures += 1
        return delay * (1.0 - self._jitter * self._random())

    def succeeded(self, now: float) -> None:
        self._succeeded_at = now


class BackoffWait(tenacity.wait.wait_base):
    """tenacity's wait, taken from a `Backoff`. Not tenacity's `wait_exponential_jitter`: its
    jitter adds up to `jitter` seconds to each wait (past the cap: 5 s became up to 6 s) where
    this one shortens it, and its count starts over with each retry loop, where a connection
    lost as soon as it is made must keep backing off across connects (the `Backoff` outlives
    the loop)."""

    def __init__(self, backoff: Backoff, clock: Callable[[], float] = time.monotonic) -> None:
        self._backoff = backoff
        self._clock = clock

    def __call__(self, retry_state: tenacity.RetryCallState) -> float:  # noqa: ARG002
        return self._backoff.failed(self._clock())


def sleep_unless_stopped(stop: asyncio.Event) -> Callable[[float], Awaitable[None]]:
    """An async sleep that raises Stopped the moment `stop` is set (tenacity's `sleep`)."""

    async def sleep(seconds: float) -> None:
        if await wait_event(stop, seconds):
            raise Stopped

    return sleep


class Outage:
    """When to say what of a run of failed attempts. Pure: the time comes in as `now`."""

    def __init__(self, remind_every: float = REMIND_EVERY) -> None:
        self._remind_every = remind_every
        self.began: float | None = None
        self._said_at = 0.0

    def failed(self, now: float) -> str | None:
        """ "first" for the outage's first failure, "still" when a reminder is due, else None."""
        if self.began is None:
            self.began = self._said_at = now
            return "first"
        if now - self._said_at >= self._remind_every:
            self._said_at = now
            return "still"
        return None

    def ended(self, now: float) -> float | None:
        """Seconds the outage lasted, None if there was none; it is over."""
        began, self.began = self.began, None
        return None if began is None else now - began


Prepare = Callable[[psycopg.AsyncConnection[Any]], Awaitable[None]]


class Reconnector:
    """Opens one connection the caller keeps, and opens it again when it is lost.

    One per connection kept. The caller says when a connection was lost (`lost()`): that
    counts as a failure for the backoff, a short wait after a connection that lasted, a
    growing one for connections lost as soon as they are made (a caller that backs off
    itself after a loss does not say it, or the two waits stack: shared_connection.py).
    `name` starts its log lines. `stop` set: `connect` raises Stopped at once, even
    mid-attempt. `retry_first=False`: any failure before the first success is raised (a
    library call that must fail rather than wait); later ones are retried.
    """

    def __init__(
        self,
        url: str,
        application_name: str,
        name: str,
        *,
        stop: asyncio.Event | None = None,
        retry_first: bool = True,
        prepare: Prepare | None = None,
        backoff: Backoff | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._url = url
        self._application_name = application_name
        self._name = name
        self._stop = stop or asyncio.Event()  # never set: only cancellation stops it
        self._retry_first = retry_first
        self._prepare = prepare
        self._backoff = backoff or Backoff()
        self._outage = Outage()
        self._clock = clock
        self._connected_once = False
        self._lost = False
        self._sleep = sleep_unless_stopped(self._stop)

    def lost(self) -> None:
        """The connection it opened last broke (the next `connect` waits first)."""
        self._lost = True

    async def connect(self) -> psycopg.AsyncConnection[Any]:
        retrying = tenacity.AsyncRetrying(
            retry=tenacity.retry_if_exception(self._retries),
            wait=BackoffWait(self._backoff, self._clock),
            sleep=self._sleep,
            before_sleep=self._failed,
            reraise=True,
        )
        try:
            if self._lost:
                self._lost = False
                await self._sleep(self._backoff.failed(self._clock()))
            conn: psycopg.AsyncConnection[Any] = await retrying(self._attempt)
        except Stopped:
            self._stopped()
            raise
        now = self._clock()
        self._backoff.succeeded(now)
        self._connected_once = True
        if (lasted := self._outage.ended(now)) is not None:
            log.info("%s: reached the database again after %.1f s", self._name, lasted)
        return conn

    async def _attempt(self) -> psycopg.AsyncConnection[Any]:
        return await unless_stopped(self.open_once(), self._stop)

    def _retries(self, error: BaseException) -> bool:
        """Every failure to connect once connected before (a daemon that runs retries even a
        permanent one, at ERROR: see the module's docstring), else unless `retry_first`."""
        return isinstance(error, psycopg.OperationalError) and (
            self._connected_once or self._retry_first
        )

    async def open_once(self) -> psycopg.AsyncConnection[Any]:
        """One attempt, no retry (what `connect` retries; a caller's short-lived connection)."""
        conn = await psycopg.AsyncConnection.connect(
            self._url, autocommit=True, application_name=self._application_name
        )
        try:
            if self._prepare is not None:
                await self._prepare(conn)
        except BaseException:
            await conn.close()
            raise
        return conn

    def _failed(self, attempt: tenacity.RetryCallState) -> None:
        """Said before each wait: the outage's start and its reminders, not every attempt."""
        outcome = attempt.outcome
        if outcome is None or (error := outcome.exception()) is None:
            return  # only failures are retried
        said = self._outage.failed(self._clock())
        text = failure_line(error)
        if said is None:
            log.debug("%s: cannot reach the database (%s); retrying", self._name, text)
        elif not is_transient(error):
            log.error(
                "%s: the database refuses the connection (%s); retrying, but waiting will not"
                " fix this: check the URL, the login and the database",
                self._name,
                text,
            )
        elif said == "first":
            log.warning("%s: cannot reach the database (%s); retrying", self._name, text)
        else:
            began = self._outage.began or 0.0
            log.warning(
                "%s: still cannot reach the database after %.0f s (%s); retrying",
                self._name,
                self._clock() - began,
                text,
            )

    def _stopped(self) -> None:
        if self._outage.began is not None:
            log.info("%s: stopping without waiting for the database", self._name)
