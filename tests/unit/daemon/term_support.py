"""A real LeadershipTerm over the in-memory store (term_store_fake.py), with real handler
calls (HandlerCaller: a plain def on its threads, an async def on the loop) and a real renewer
of its lease (renewals_fake.py), and what the tests wait for and check."""

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable, Iterable

from outbox.positions import START, Position
from poller.daemon.delivery.handler_caller import HandlerCaller
from poller.daemon.handlers import Handler
from poller.daemon.options import DaemonOptions
from poller.daemon.reporting.metrics import SubscriptionMetrics
from poller.daemon.term.leadership_term import LeadershipTerm
from poller.daemon.term.lease_watch import LeaseWatch
from poller.daemon.term.notify_listener import NotifyListener
from poller.daemon.term.self_fence import SelfFence
from poller.message import Message
from tests.unit.daemon.renewals_fake import alone, started_renewer
from tests.unit.daemon.term_store_fake import (
    Checkpointed,
    Event,
    FakeTermStore,
    Handled,
    Parked,
    Sought,
)

# Renewals every 20 ms, ticks every 2 ms: a seek, a lost lease or a request is seen within
# a few ms, and no test waits long for one.
FAST = DaemonOptions(
    lease_seconds=2.0,
    renew_every=0.02,
    tick_every=0.002,
    poll_interval_min=0.001,
    poll_interval_max=0.005,
    hidden_recheck=0.002,
    # Bounds a graceful stop's wait for handler calls (none of these tests' handlers blocks
    # at a stop).
    shutdown_timeout=0.5,
    handler_threads=4,
)

# Checkpoints after each finished message (none waits for a batch): what the tests check.
EVERY_MESSAGE = {"min_checkpoint_count": 1, "checkpoint_after": 0.0}

WAIT = 3.0
"""Seconds any one condition gets before the test fails (each takes a few ms)."""


async def until(condition: Callable[[], object], what: str, timeout: float = WAIT) -> None:
    """Poll `condition` on the loop (handler threads and the term's tasks move it on)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting until {what}")
        await asyncio.sleep(0.001)


async def renewals(store: FakeTermStore, count: int) -> None:
    """Wait until the term renewed `count` times more (each applies what the store holds)."""
    seen = len(store.accepted("renew"))
    await until(lambda: len(store.accepted("renew")) >= seen + count, f"{count} renewals")


class RunningTerm:
    """A term of `store`'s subscription running as a task, as the worker starts one."""

    def __init__(self, store: FakeTermStore, handler: Handler, options: DaemonOptions) -> None:
        self.store = store
        self.caller = HandlerCaller(handler, options.handler_threads)
        now = time.monotonic()
        fence = SelfFence.acquired(
            lease_seconds=options.lease_seconds,
            margin=options.renew_every,
            sent_at=now,
            received_at=now,
            previous_lease_left=0.0,
        )
        self.stop = asyncio.Event()
        self.shutdown = asyncio.Event()
        self.lease = LeaseWatch(store.lease, fence)
        self.renewer = started_renewer(lambda _unit: store, alone(store), lambda: None, options)
        # Renewed from now until the test ends (the worker's `holding` block, here).
        self.held = contextlib.ExitStack()
        self.held.enter_context(self.renewer.holding(self.lease))
        self.term = LeadershipTerm(
            store,
            self.lease,
            store.record(),
            self.caller,
            options,
            NotifyListener(),
            self.stop,
            self.shutdown,
            SubscriptionMetrics(store.lease.subscription_id),
        )
        self.task = asyncio.create_task(self.term.run())

    async def ended(self) -> None:
        """The term's end (raises what ended it), which must come within WAIT."""
        async with asyncio.timeout(WAIT):
            await asyncio.shield(self.task)

    async def stopped(self) -> None:
        """A graceful stop, as at SIGTERM."""
        self.stop.set()
        self.shutdown.set()
        await self.ended()


@contextlib.asynccontextmanager
async def running_term(
    store: FakeTermStore, handler: Handler, options: DaemonOptions = FAST
) -> AsyncIterator[RunningTerm]:
    running = RunningTerm(store, handler, options)
    try:
        yield running
    finally:
        running.task.cancel()
        with contextlib.suppress(BaseException):
            await running.task
        running.caller.close()
        running.held.close()
        await running.renewer.close()


def recording(journal: list[Event]) -> Callable[[Message], None]:
    """A plain def handler that records each message it handled."""

    def handle(message: Message) -> None:
        journal.append(Handled(message.at))

    return handle


def async_recording(journal: list[Event]) -> Callable[[Message], object]:
    """An async def handler that records each message it handled."""

    async def handle(message: Message) -> None:
        journal.append(Handled(message.at))

    return handle


def handled(journal: Iterable[Event]) -> list[Position]:
    return [event.at for event in journal if isinstance(event, Handled)]


def checkpoint_only_passes_finished(
    journal: list[Event], messages: list[Message], start: Position = START
) -> None:
    """Every checkpoint that landed passes only messages handled or parked before it, since
    the last seek (a seek's target is the floor): at-least-once, checked in write order."""
    floor, finished = start, set[Position]()
    for event in journal:
        if isinstance(event, Handled | Parked):
            finished.add(event.at)
        elif isinstance(event, Sought):
            floor, finished = event.to, set()
        elif isinstance(event, Checkpointed):
            passed = [m.at for m in messages if floor < m.at <= event.at]
            missing = [at for at in passed if at not in finished]
            assert not missing, f"checkpoint {event} passed {missing}, never delivered"
