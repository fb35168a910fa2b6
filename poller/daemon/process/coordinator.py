"""One subscription in a daemon process: this process's membership of the subscription's
group, and a worker (worker.py) for each shard the assignment gives this process.

Every `renew_every` the process's lease renewer (lease_renewer.py) renews its membership with
its leases, which returns the layout and the live members; poller.membership.assign deals the
shards out. A shard given to this process
gets a worker; a shard taken away has its worker stopped gracefully (its runs finished, its
checkpoint written, its lease released), and the process it went to, which has been trying its
lease meanwhile, takes it then. A process that stops leaves the group at once (SIGTERM); one
that dies leaves when its membership runs out (the lease's time), and so do its leases.
"""

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import psycopg

from poller.daemon.delivery.handler_caller import HandlerCaller, HandlerThreads
from poller.daemon.delivery.handler_calls import CallObserver
from poller.daemon.handlers import Handler
from poller.daemon.log_context import SUBSCRIPTION
from poller.daemon.options import DaemonOptions
from poller.daemon.process.subscription_database import (
    MembershipConnection,
    SubscriptionDatabase,
)
from poller.daemon.process.worker import SubscriptionWorker
from poller.daemon.reporting.failure_log import FailureLog
from poller.daemon.reporting.metrics import SubscriptionMetrics
from poller.daemon.term.notify_listener import NotifyListener
from poller.membership import Layout, ShardUnit, assign
from poller.message import Message
from poller.operations.pollable import NotPollableError, check_pollable
from poller.reconnect import failure_line
from poller.store.membership_store import GroupState
from poller.store.records import Lease
from poller.waits import Stopped, wait_event

log = logging.getLogger(__name__)


@dataclass
class _Shard:
    """A shard this process runs: its worker, the worker's task, and its own stop."""

    worker: SubscriptionWorker
    caller: HandlerCaller
    stop: asyncio.Event
    task: "asyncio.Task[None]"


class SubscriptionCoordinator:
    def __init__(
        self,
        open_database: Callable[[asyncio.Event], SubscriptionDatabase],
        subscription_id: str,
        handler: Handler,
        options: DaemonOptions,
        notifications: NotifyListener,
        metrics: SubscriptionMetrics,
        observers: Sequence[CallObserver] = (),
    ) -> None:
        # The subscription's database in this process (PostgresSubscriptionDatabase; the unit
        # tests' in-memory fake), opened in run with the stop its connections give up on.
        self._open_database = open_database
        self._subscription_id = subscription_id
        self._handler = handler
        self._options = options
        self._notifications = notifications
        self._metrics = metrics
        # Made in run (it needs the stop): the process's connections for the subscription,
        # and its member id, which is also every lease's holder.
        self._database: SubscriptionDatabase | None = None
        self._holder = ""
        # One log budget for the subscription's handler failures, whichever shard they are of;
        # it and the other observers (metrics, spans) see every shard's calls.
        self._observers = [FailureLog(subscription_id), *observers]
        self._shards: dict[ShardUnit, _Shard] = {}
        # The handler's threads, shared by every shard this process leads (see HandlerThreads).
        self._threads = HandlerThreads(options.handler_threads)
        # Shards whose worker ended by itself (a fatal error, or the shard left the layout):
        # not started again until the layout changes.
        self._ended: set[ShardUnit] = set()
        self._ended_under: Layout | None = None
        # The callers of stopped shards whose threads may still run a handler (see running),
        # with their shard: it is not started again here while they do (see _start).
        self._closed_callers: list[tuple[ShardUnit, HandlerCaller]] = []

    async def run(self, stop: asyncio.Event) -> None:
        SUBSCRIPTION.set(self._subscription_id)  # this task's context: see log_context
        self._database = self._open_database(stop)
        self._holder = self._database.holder
        checked = False
        try:
            while not stop.is_set():
                try:
                    if not checked:
                        if not await self._pollable(await self._database.membership(stop)):
                            return
                        checked = True
                    # The group as the renewer's last renewal found it, or its next one.
                    state = await self._database.renewer.membership(stop)
                except Stopped:
                    return  # told to stop while the database was unreachable
                except psycopg.OperationalError as error:
                    log.warning(
                        "%s: cannot load the subscription: %s",
                        self._subscription_id,
                        failure_line(error),
                    )
                else:
                    self._metrics.database_answered()
                    if state is None:
                        log.error(
                            "%s: the subscription was deleted; its worker stops",
                            self._subscription_id,
                        )
                        return
                    self._follow(state, stop)
                self._reap()
                await wait_event(stop, self._options.renew_every)
        finally:
            # Leave first: the others start trying this process's leases now, and take each
            # one the moment its shard's graceful stop releases it. Cancelled (a database
            # that does not answer, see runner.py), the shards are stopped and cancelled too.
            try:
                with contextlib.suppress(psycopg.Error):
                    await self._database.renewer.leave()
            finally:
                try:
                    await self._stop_all()
                finally:
                    await self._database.close()
                    self._database = None
                    self._threads.close()

    def running(self) -> list[Message]:
        """Messages whose handlers still run on a thread now: after the process's stop, those
        its shutdown timeout gave up on (nothing that has returned since)."""
        callers = [shard.caller for shard in self._shards.values()]
        callers += [caller for _, caller in self._closed_callers]
        return [message for caller in callers for message in caller.running()]

    async def _pollable(self, membership: MembershipConnection) -> bool:
        lease = Lease(self._subscription_id, self._holder, self._options.lease_seconds)
        try:
            check_pollable(self._subscription_id, await membership.load_subscription(lease))
        except NotPollableError as error:
            log.error("%s; its worker stops", error)
            return False
        return True

    def _follow(self, state: GroupState, stop: asyncio.Event) -> None:
        """Start workers for the shards given to this process, stop the others'."""
        if state.layout != self._ended_under:
            self._ended.clear()
        wanted = set(assign(state.layout, state.members, state.now).get(self._holder, []))
        for unit, shard in self._shards.items():
            if unit not in wanted and not shard.stop.is_set():
                log.info("%s: shard %s goes to another process", self._subscription_id, unit)
                shard.stop.set()
        for unit in sorted(wanted - self._shards.keys() - self._ended):
            self._start(unit, stop)
        self._ended_under = state.layout

    def _start(self, unit: ShardUnit, stop: asyncio.Event) -> None:
        assert self._database is not None  # set for as long as run runs
        if any(closed == unit for closed, _ in self._closed_callers):
            # A stopped worker of this shard left a call running (its term ended abruptly):
            # this process's leases share one holder, so a new worker would take the lease
            # back at once and start the call's key beside it. Started once it returned.
            return
        # A caller per shard (on the subscription's threads): a shard's restart waits for its
        # own handlers to be quiet, never for another shard's, which never are under load.
        caller = HandlerCaller(self._handler, self._threads, self._observers)
        worker = SubscriptionWorker(
            self._database,
            self._subscription_id,
            caller,
            self._options,
            self._notifications,
            self._metrics,
            unit,
        )
        own_stop = asyncio.Event()
        task = asyncio.create_task(
            _run_until(worker, own_stop, stop), name=f"{self._subscription_id}:{unit}"
        )
        self._shards[unit] = _Shard(worker, caller, own_stop, task)

    def _reap(self) -> None:
        for unit, shard in list(self._shards.items()):
            if not shard.task.done():
                continue
            del self._shards[unit]
            shard.caller.close()
            self._closed_callers.append((unit, shard.caller))
            if not shard.stop.is_set():
                self._ended.add(unit)  # see __init__
            if not shard.task.cancelled() and (error := shard.task.exception()) is not None:
                log.error("%s: shard %s failed: %r", self._subscription_id, unit, error)
        # Kept only while a handler thread of theirs still runs: shards move many times over a
        # long-lived process, and each stopped one would otherwise stay here for good.
        self._closed_callers = [(u, c) for u, c in self._closed_callers if c.running()]

    async def _stop_all(self) -> None:
        for shard in self._shards.values():
            shard.stop.set()
        await asyncio.gather(
            *(shard.task for shard in self._shards.values()), return_exceptions=True
        )
        for shard in self._shards.values():
            shard.stop.set()  # so _reap does not count it as ended by itself
        self._reap()


async def _run_until(
    worker: SubscriptionWorker, own_stop: asyncio.Event, stop: asyncio.Event
) -> None:
    """Run a shard's worker until its own stop or the process's is set."""
    relay = asyncio.create_task(stop.wait())
    relay.add_done_callback(lambda _: own_stop.set())
    try:
        await worker.run(own_stop, stop)
    finally:
        relay.cancel()
