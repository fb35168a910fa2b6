"""The daemon's Prometheus metrics, and what its probes ask: is it alive, is it ready.

One registry per `run_daemon` call, never prometheus_client's global one, so two daemons in
one process (tests, an application embedding two) never share or collide on a series.

Outcomes are tallied where they are known: a handler call's ending, as the handler caller
classified it (`SubscriptionMetrics` observes calls at the one tap, handler_calls.py, when a
metrics port is given), and a durable park (the leadership term calls `parked()`).
Everything is turned into Prometheus families only when Prometheus scrapes
(`metrics_collector.py`); figures that describe state (in flight, buffered, lag) are not kept
at all, but read then.
"""

import asyncio
import bisect
import concurrent.futures
import dataclasses
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol, TypeVar

from prometheus_client import CollectorRegistry

from poller.daemon.delivery.handler_calls import CallObserver, Ending, HandlerCall
from poller.daemon.options import DaemonOptions
from poller.membership import ShardUnit
from poller.message import Message
from poller.subscription import SubscriptionSettings

T = TypeVar("T")

# Handler calls last from a millisecond to message_timeout (30 s by default).
HANDLER_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)

# How long /healthz waits for the event loop: a kubelet probe gives up after 1 s by default.
LOOP_ANSWER_TIMEOUT = 0.5

# The outcome label of outbox_handler_duration_seconds; the collector's counters add them up.
# Each ending's label is its value; TIMED_OUT is the machine's verdict on a call, whatever
# it returned.
TIMED_OUT = "timed_out"
OUTCOMES = (*(ending.value for ending in Ending), TIMED_OUT)


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


@dataclasses.dataclass(frozen=True)
class _ShardsView:
    """Several shards' terms in one process, seen as one (their figures added up)."""

    views: list[TermView]

    @property
    def settings(self) -> SubscriptionSettings:
        return self.views[0].settings

    @property
    def in_flight_by_consumer(self) -> Mapping[int, int]:
        total: Counter[int] = Counter()
        for view in self.views:
            total.update(view.in_flight_by_consumer)
        return total

    @property
    def buffered_count(self) -> int:
        return sum(v.buffered_count for v in self.views)

    @property
    def retry_queue_length(self) -> int:
        return sum(v.retry_queue_length for v in self.views)


class HandlerTally:
    """Handler calls by outcome: a count per duration bucket, and the durations' sum.

    Plain lists under one lock rather than prometheus_client's Counter and Histogram: those
    took 4.3 us a call here, this about 1.5, against the daemon's 12 us a message (82k/s);
    the collector turns the tally into the counters and the histogram when Prometheus
    scrapes. Sync handlers record from their threads, hence the lock.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # Index i counts durations <= HANDLER_BUCKETS[i]; the last, the longer ones.
        self._buckets = {outcome: [0] * (len(HANDLER_BUCKETS) + 1) for outcome in OUTCOMES}
        self._sums = dict.fromkeys(OUTCOMES, 0.0)
        self._retried = 0
        self._parked = 0

    def call_ended(self, outcome: str, duration: float) -> None:
        bucket = bisect.bisect_left(HANDLER_BUCKETS, duration)
        with self._lock:
            self._buckets[outcome][bucket] += 1
            self._sums[outcome] += duration

    def retry_started(self) -> None:
        with self._lock:
            self._retried += 1

    def parked(self) -> None:
        with self._lock:
            self._parked += 1

    def snapshot(self) -> "TallySnapshot":
        with self._lock:
            return TallySnapshot(
                {outcome: list(counts) for outcome, counts in self._buckets.items()},
                dict(self._sums),
                self._retried,
                self._parked,
            )


@dataclasses.dataclass(frozen=True)
class TallySnapshot:
    buckets: dict[str, list[int]]
    sums: dict[str, float]
    retried: int
    parked: int

    def calls(self, *outcomes: str) -> int:
        return sum(sum(self.buckets[outcome]) for outcome in outcomes)


class SubscriptionMetrics(CallObserver):
    """One subscription's instruments and state; the one object the daemon's hooks call."""

    def __init__(self, subscription: str) -> None:
        self.subscription = subscription
        self.tally = HandlerTally()
        # The running leadership terms', one per shard this process leads; none on standby.
        self._views: list[TermView] = []
        self.last_database_answer: float | None = None  # time.monotonic()
        # Leadership terms this process started, by shard (`SHARD/COUNT`); on the loop only.
        self.terms_started: Counter[str] = Counter()

    # Hooks --------------------------------------------------------------------------------

    def leading(self, view: TermView, shard: ShardUnit) -> None:
        """A leadership term of `shard` began; `view` describes it until `standing_by(view)`."""
        self._views.append(view)
        self.terms_started[str(shard)] += 1

    def standing_by(self, view: TermView) -> None:
        self._views.remove(view)

    @property
    def view(self) -> TermView | None:
        """What this process's terms hold, summed over its shards; None on standby."""
        if len(self._views) <= 1:
            return self._views[0] if self._views else None
        return _ShardsView(list(self._views))

    def database_answered(self) -> None:
        """A lease statement (a standby's try, a leader's renewal) came back."""
        self.last_database_answer = time.monotonic()

    def parked(self) -> None:
        self.tally.parked()

    # Observing handler calls (handler_calls.py) ------------------------------------------

    def call_started(self, messages: Sequence[Message]) -> None:
        # Replays count their attempts afresh, so a replay's first call is no retry.
        for message in messages:
            if message.delivery_attempt > 1:
                self.tally.retry_started()

    def call_ended(self, call: HandlerCall, started: object) -> None:  # noqa: ARG002
        """A batch call counts as one call per message, each lasting the whole call; past its
        deadline it is timed out, as the machine decided, whatever it returned."""
        duration = call.duration
        if call.timed_out:
            for _ in call.messages:
                self.tally.call_ended(TIMED_OUT, duration)
            return
        for ending in call.endings:
            self.tally.call_ended(ending.value, duration)


class DaemonMetrics:
    """The registry of one daemon process, its subscriptions' metrics, and its probes."""

    def __init__(self, subscriptions: list[str], options: DaemonOptions) -> None:
        self.registry = CollectorRegistry()
        self.subscriptions = {name: SubscriptionMetrics(name) for name in subscriptions}
        # A leader renews every renew_every, a standby tries every standby_poll: a worker
        # silent for longer than this has lost its database.
        self._answer_limit = options.lease_seconds + options.standby_poll
        self._loop = asyncio.get_running_loop()
        # The hot standby the daemon reads messages from, if any: its lag is served too.
        self.read_database_url = options.read_database_url

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
