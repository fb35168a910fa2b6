"""The daemon's Prometheus metrics, and what its probes ask: is it alive, is it ready.

One registry per `run_daemon` call, never prometheus_client's global one, so two daemons in
one process (tests, an application embedding two) never share or collide on a series.

Counters move where outcomes are known: a handler's return or exception (the wrapper
`SubscriptionMetrics.observed`, outside the delivery path's own code) and a durable park (the
leadership term calls `parked()`). Figures that describe state (in flight, buffered, lag) are
not kept up to date at all: `metrics_collector.py` computes them when Prometheus scrapes.
"""

import asyncio
import concurrent.futures
import inspect
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol, TypeVar

from prometheus_client import CollectorRegistry, Counter, Histogram

from poller.daemon.handlers import Handler
from poller.daemon.options import DaemonOptions
from poller.message import Message
from poller.outcomes import ParkMessage, RetryMessage, SkipMessage
from poller.subscription import SubscriptionSettings

T = TypeVar("T")

# Handler calls last from a millisecond to message_timeout (30 s by default).
HANDLER_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)

# How long /healthz waits for the event loop: a kubelet probe gives up after 1 s by default.
LOOP_ANSWER_TIMEOUT = 0.5

# The outcome label of outbox_handler_duration_seconds, and the counter each one moves.
DELIVERED, FAILED, TIMED_OUT = "delivered", "failed", "timed_out"
RETRY_REQUESTED, PARK_REQUESTED, SKIPPED = "retry_requested", "park_requested", "skipped"
OUTCOMES = (DELIVERED, FAILED, TIMED_OUT, RETRY_REQUESTED, PARK_REQUESTED, SKIPPED)


class TermView(Protocol):
    """What a leadership term shows the metrics (its SubscriptionMachine has all of it).
    Read on the event loop only: the machine is not thread-safe."""

    @property
    def settings(self) -> SubscriptionSettings: ...

    @property
    def in_flight_by_consumer(self) -> Mapping[int, int]: ...

    @property
    def buffered_count(self) -> int: ...

    @property
    def retry_queue_length(self) -> int: ...


class Instruments:
    """The counters and the histogram of one registry, labelled by subscription."""

    def __init__(self, registry: CollectorRegistry) -> None:
        def counter(name: str, help_text: str) -> Counter:
            return Counter(name, help_text, ["subscription"], registry=registry)

        self.delivered = counter(
            "outbox_messages_delivered", "Handler calls that returned (the message is done)."
        )
        self.failed = counter(
            "outbox_messages_failed",
            "Handler calls that raised an error or ran past message_timeout.",
        )
        self.retried = counter(
            "outbox_messages_retried", "Handler calls of a second or later attempt, at start."
        )
        self.skipped = counter("outbox_messages_skipped", "Handler calls that raised SkipMessage.")
        self.parked = counter(
            "outbox_messages_parked", "Messages parked (their parked row committed)."
        )
        self.handler_duration = Histogram(
            "outbox_handler_duration_seconds",
            "Time in the handler, by how the call ended (outcome label).",
            ["subscription", "outcome"],
            registry=registry,
            buckets=HANDLER_BUCKETS,
        )


class SubscriptionMetrics:
    """One subscription's instruments and state; the one object the daemon's hooks call."""

    def __init__(self, subscription: str, instruments: Instruments) -> None:
        self.subscription = subscription
        self._delivered = instruments.delivered.labels(subscription)
        self._failed = instruments.failed.labels(subscription)
        self._retried = instruments.retried.labels(subscription)
        self._skipped = instruments.skipped.labels(subscription)
        self._parked = instruments.parked.labels(subscription)
        # Bound once: labels() looks its child up under a lock, on every message otherwise.
        self._durations = {
            outcome: instruments.handler_duration.labels(subscription, outcome)
            for outcome in OUTCOMES
        }
        self._counted = {
            DELIVERED: self._delivered,
            FAILED: self._failed,
            TIMED_OUT: self._failed,
            SKIPPED: self._skipped,
        }
        self.view: TermView | None = None  # the running leadership term's, None on standby
        self.last_database_answer: float | None = None  # time.monotonic()
        self._message_timeout = float("inf")

    # Hooks --------------------------------------------------------------------------------

    def leading(self, view: TermView) -> None:
        """A leadership term began; `view` describes it until `standing_by()`."""
        self.view = view
        # Read here, on the loop: handler threads compare durations with it.
        self._message_timeout = view.settings.message_timeout

    def standing_by(self) -> None:
        self.view = None

    def database_answered(self) -> None:
        """A lease statement (a standby's try, a leader's renewal) came back."""
        self.last_database_answer = time.monotonic()

    def parked(self) -> None:
        self._parked.inc()

    def observed(self, handler: Handler) -> Handler:
        """`handler`, timed and counted; async if it is (HandlerCaller runs it on the loop
        then, and on a thread otherwise, by the same test)."""
        if inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(
            getattr(handler, "__call__", None)  # noqa: B004 - callable objects with async __call__
        ):

            async def observed_async(message: Message) -> Any:
                return await self._timed(message, handler(message))

            return observed_async

        def observed_sync(message: Message) -> Any:
            started = self._start(message)
            try:
                result = handler(message)
            except BaseException as error:
                self._ended(started, error)
                raise
            if inspect.isawaitable(result):  # a plain def that returns an awaitable
                return self._timed_from(started, result)
            self._ended(started, None)
            return result

        return observed_sync

    # Timing -------------------------------------------------------------------------------

    def _start(self, message: Message) -> float:
        # Replays count their attempts afresh, so a replay's first call is no retry.
        if message.delivery_attempt > 1:
            self._retried.inc()
        return time.monotonic()

    async def _timed(self, message: Message, result: Awaitable[T]) -> T:
        return await self._timed_from(self._start(message), result)

    async def _timed_from(self, started: float, result: Awaitable[T]) -> T:
        try:
            value = await result
        except BaseException as error:
            self._ended(started, error)
            raise
        self._ended(started, None)
        return value

    def _ended(self, started: float, error: BaseException | None) -> None:
        duration = time.monotonic() - started
        outcome = _outcome(error, timed_out=duration >= self._message_timeout)
        self._durations[outcome].observe(duration)
        counter = self._counted.get(outcome)
        if counter is not None:
            counter.inc()


def _outcome(error: BaseException | None, *, timed_out: bool) -> str:
    # Past message_timeout the machine has already failed the call, whatever it returned.
    if timed_out:
        return TIMED_OUT
    if error is None:
        return DELIVERED
    if isinstance(error, RetryMessage):
        return RETRY_REQUESTED
    if isinstance(error, ParkMessage):
        return PARK_REQUESTED
    if isinstance(error, SkipMessage):
        return SKIPPED
    return FAILED


class DaemonMetrics:
    """The registry of one daemon process, its subscriptions' metrics, and its probes."""

    def __init__(self, subscriptions: list[str], options: DaemonOptions) -> None:
        self.registry = CollectorRegistry()
        instruments = Instruments(self.registry)
        self.subscriptions = {
            name: SubscriptionMetrics(name, instruments) for name in subscriptions
        }
        # A leader renews every renew_every, a standby tries every standby_poll: a worker
        # silent for longer than this has lost its database.
        self._answer_limit = options.lease_seconds + options.standby_poll
        self._loop = asyncio.get_running_loop()

    def __getitem__(self, subscription: str) -> SubscriptionMetrics:
        return self.subscriptions[subscription]

    def on_loop(self, function: Callable[[], T], timeout: float) -> T:
        """`function()` run on the daemon's event loop, from another thread (the HTTP
        server's): what the loop owns is read between two of its steps, never during one.
        Raises TimeoutError if the loop does not get to it in time."""
        future: concurrent.futures.Future[T] = concurrent.futures.Future()

        def run() -> None:
            try:
                future.set_result(function())
            except BaseException as error:  # handed to the waiting thread
                future.set_exception(error)

        self._loop.call_soon_threadsafe(run)
        return future.result(timeout)

    def alive(self) -> tuple[bool, str]:
        """Liveness: the event loop still turns (a blocking `async def` handler stops it)."""
        try:
            self.on_loop(lambda: None, LOOP_ANSWER_TIMEOUT)
        except (TimeoutError, RuntimeError):  # RuntimeError: the loop is closed
            return False, f"the event loop did not answer within {LOOP_ANSWER_TIMEOUT} s"
        return True, "alive"

    def ready(self) -> tuple[bool, str]:
        """Readiness: every subscription's worker heard from the database lately, as a
        leader renewing its lease or as a standby trying to take it."""
        now = time.monotonic()
        silent = []
        for name, subscription in self.subscriptions.items():
            answered = subscription.last_database_answer
            if answered is None:
                silent.append(f"{name}: no database answer yet")
            elif now - answered > self._answer_limit:
                silent.append(f"{name}: no database answer for {now - answered:.1f} s")
        if silent:
            return False, "not ready: " + "; ".join(silent)
        roles = (
            f"{name}: {'leader' if s.view is not None else 'standby'}"
            for name, s in self.subscriptions.items()
        )
        return True, "ready: " + ", ".join(roles)
