"""A real SubscriptionWorker and a real SubscriptionCoordinator over the in-memory database
(subscription_database_fake.py), each running as a task, as a daemon process runs them."""

import asyncio
import contextlib
import dataclasses
import time
from collections.abc import AsyncIterator, Callable

from poller.daemon.delivery.handler_caller import HandlerCaller
from poller.daemon.handlers import Handler
from poller.daemon.options import DaemonOptions
from poller.daemon.process.coordinator import SubscriptionCoordinator
from poller.daemon.process.worker import SubscriptionWorker
from poller.daemon.reporting.metrics import SubscriptionMetrics
from poller.daemon.term.notify_listener import NotifyListener
from poller.membership import ONLY_SHARD, ShardUnit
from poller.message import Message
from tests.unit.daemon.subscription_database_fake import FakeSubscriptionDatabase
from tests.unit.daemon.term_store_fake import SUBSCRIPTION
from tests.unit.daemon.term_support import FAST, WAIT

# A standby tries the lease every 5 ms: a lease set free is taken within a few ms.
PROCESS = dataclasses.replace(FAST, standby_poll=0.005)


class Running:
    """A worker's or a coordinator's run as a task, and the stop it is given."""

    def __init__(self, task: "asyncio.Task[None]", stop: asyncio.Event) -> None:
        self.task = task
        self.stop = stop

    async def ended(self) -> None:
        """The run's end (raises what ended it), which must come within WAIT."""
        async with asyncio.timeout(WAIT):
            await asyncio.shield(self.task)

    async def stopped(self) -> None:
        """A graceful stop, as at SIGTERM."""
        self.stop.set()
        await self.ended()


@contextlib.asynccontextmanager
async def running_worker(
    database: FakeSubscriptionDatabase,
    handler: Handler,
    options: DaemonOptions = PROCESS,
    unit: ShardUnit = ONLY_SHARD,
) -> AsyncIterator[Running]:
    caller = HandlerCaller(handler, options.handler_threads)
    worker = SubscriptionWorker(
        database,
        SUBSCRIPTION,
        caller,
        options,
        NotifyListener(),
        SubscriptionMetrics(SUBSCRIPTION),
        unit,
    )
    # The process's stop is the worker's own here: a shard moving away is the coordinator's.
    stop = asyncio.Event()
    running = Running(asyncio.create_task(worker.run(stop, stop)), stop)
    try:
        yield running
    finally:
        await _cancelled(running.task)
        caller.close()
        await database.renewer.close()


@contextlib.asynccontextmanager
async def running_coordinator(
    database: FakeSubscriptionDatabase, handler: Handler, options: DaemonOptions = PROCESS
) -> AsyncIterator[Running]:
    coordinator = SubscriptionCoordinator(
        lambda _stop: database,
        SUBSCRIPTION,
        handler,
        options,
        NotifyListener(),
        SubscriptionMetrics(SUBSCRIPTION),
    )
    stop = asyncio.Event()
    running = Running(asyncio.create_task(coordinator.run(stop)), stop)
    try:
        yield running
    finally:
        await _cancelled(running.task)
        await database.renewer.close()


def timed(handled_at: list[float]) -> Callable[[Message], None]:
    """A plain def handler that records when each call began."""

    def handle(message: Message) -> None:  # noqa: ARG001
        handled_at.append(time.monotonic())

    return handle


async def _cancelled(task: "asyncio.Task[None]") -> None:
    task.cancel()
    with contextlib.suppress(BaseException):
        await task
