"""One shard of a subscription (of a plain one: the subscription) in a daemon process:
connect, stand by until leader, lead, repeat. The coordinator (coordinator.py) runs one for each
shard this process is given, and stops it when the shard goes to another process.

Connection loss, a PostgreSQL restart or a database failover end the current term; the worker
reconnects under the one reconnect policy (poller/reconnect.py: backoff with jitter, given up
the moment the worker is told to stop) and resumes from the stored checkpoint, so nothing is
lost and nothing skipped (messages handled after the last checkpoint are delivered again:
at-least-once).
"""

import asyncio
import logging
import time

from poller.daemon.delivery.handler_caller import HandlerCaller
from poller.daemon.log_context import LEADER_TOKEN, SHARD, SUBSCRIPTION
from poller.daemon.options import DaemonOptions
from poller.daemon.process.subscription_database import ShardConnection, SubscriptionDatabase
from poller.daemon.process.worker_failures import Failure, Then, reaction_to
from poller.daemon.reporting.metrics import SubscriptionMetrics
from poller.daemon.term.leadership_term import LeadershipTerm
from poller.daemon.term.lease_watch import LeaseWatch
from poller.daemon.term.notify_listener import NotifyListener
from poller.daemon.term.self_fence import SelfFence
from poller.membership import ONLY_SHARD, ShardUnit
from poller.operations.pollable import check_pollable
from poller.reconnect import Backoff
from poller.store.records import Lease, SubscriptionRecord
from poller.waits import wait_event

log = logging.getLogger(__name__)


class SubscriptionWorker:
    def __init__(
        self,
        database: SubscriptionDatabase,
        subscription_id: str,
        caller: HandlerCaller,
        options: DaemonOptions,
        notifications: NotifyListener,
        metrics: SubscriptionMetrics,
        unit: ShardUnit = ONLY_SHARD,
    ) -> None:
        self._database = database
        self._metrics = metrics
        self._subscription_id = subscription_id
        self._caller = caller
        self._options = options
        self._notifications = notifications
        # The process's member id holds the lease: it names the shared connections, so a
        # standby elsewhere sees at once when this process's session is gone.
        self._lease = Lease(subscription_id, database.holder, options.lease_seconds, unit)
        # How the logs name it: a shard only where there are several.
        self._name = subscription_id if unit == ONLY_SHARD else f"{subscription_id} shard {unit}"
        # After an error waiting may mend: 2 s doubling to 30 s, reset by a term that ran
        # 30 s. After a connection error: the reconnect policy's backoff, the one wait of a
        # lost connection (see worker_failures.py).
        self._backoffs = {
            Then.AFTER_FAILURE: Backoff(first=2.0, longest=30.0),
            Then.AFTER_LOSS: Backoff(),
        }

    async def run(self, stop: asyncio.Event, shutdown: asyncio.Event) -> None:
        """Until `stop` (the shard moves away, or the process stops; `shutdown` says which:
        see LeadershipTerm)."""
        SUBSCRIPTION.set(self._subscription_id)  # this task's context: see log_context
        SHARD.set(str(self._lease.unit))
        try:
            await self._run(stop, shutdown)
        finally:
            self._database.release_writes(self._lease.unit)

    async def _run(self, stop: asyncio.Event, shutdown: asyncio.Event) -> None:
        while not stop.is_set():
            LEADER_TOKEN.set(None)
            try:
                shard = await self._database.shard(self._lease, stop)
                fence = await self._become_leader(shard, stop)
                if fence is None:
                    return
                LEADER_TOKEN.set(self._lease.token)
                # Renewed by the process's renewer from now until the term ends.
                lease = LeaseWatch(self._lease, fence)
                with self._database.renewer.holding(lease):
                    record = await self._load(shard)
                    if not record.layout.has(self._lease.unit):
                        # The shard count changed since the coordinator looked: not ours.
                        await shard.release()
                        return
                    async with shard.term_store(record.layout) as store:
                        for backoff in self._backoffs.values():
                            backoff.succeeded(time.monotonic())
                        session = LeadershipTerm(
                            store,
                            lease,
                            record,
                            self._caller,
                            self._options,
                            self._notifications,
                            stop,
                            shutdown,
                            self._metrics,
                        )
                        await session.run()
                if not session.restart_requested:
                    return
            except Exception as error:
                if not await self._after(error, stop):
                    return
            await self._wait_for_last_calls(stop)

    async def _after(self, error: Exception, stop: asyncio.Event) -> bool:
        """Say what ended the term (or the wait for one) and wait as its row in
        worker_failures.py says; whether the worker goes on."""
        reaction = reaction_to(error)
        pause = self._backoff_after(reaction.then)
        if reaction.level != logging.NOTSET:
            leading = LEADER_TOKEN.get() is not None
            failure = Failure(error, self._name, self._subscription_id, leading, pause)
            log.log(
                reaction.level,
                "%s",
                reaction.says(failure),
                exc_info=error if reaction.traceback else None,
            )
        if reaction.then is Then.STOP:
            return False
        if pause:
            await wait_event(stop, pause)
        return True

    def _backoff_after(self, then: Then) -> float:
        backoff = self._backoffs.get(then)
        return 0.0 if backoff is None else backoff.failed(time.monotonic())

    async def _wait_for_last_calls(self, stop: asyncio.Event) -> None:
        """A term that ended abruptly (its lease lost, its connection cut) leaves its handler
        calls running on their threads, and a thread cannot be stopped: the next term of this
        shard in this process would start their keys beside them, so it waits for them (the
        worker ends at once when stopped: the coordinator keeps count of what still runs)."""
        while not await self._caller.wait_quiet(stop, self._options.shutdown_timeout):
            if stop.is_set():
                return
            log.warning(
                "%s: handlers of the last term still run; the next term waits for them: %s",
                self._name,
                ", ".join(map(repr, self._caller.running())),
            )

    async def _become_leader(self, shard: ShardConnection, stop: asyncio.Event) -> SelfFence | None:
        announced = False
        while not stop.is_set():
            sent_at = time.monotonic()
            previous_lease_left = await shard.try_acquire()
            self._metrics.database_answered()
            if previous_lease_left is not None:
                if previous_lease_left:
                    log.info(
                        "%s: took over a lease with %.1f s left; deliveries start after it",
                        self._subscription_id,
                        previous_lease_left,
                    )
                fence = SelfFence.acquired(
                    lease_seconds=self._options.lease_seconds,
                    margin=self._options.renew_every,
                    sent_at=sent_at,
                    received_at=time.monotonic(),
                    previous_lease_left=previous_lease_left,
                    earlier_not_before=self._database.not_before.get(self._lease.unit, 0.0),
                )
                self._database.not_before[self._lease.unit] = fence.not_before
                return fence
            if not announced:
                log.info("%s has a leader; standing by", self._name)
                announced = True
            await wait_event(stop, self._options.standby_poll)
        return None

    async def _load(self, shard: ShardConnection) -> SubscriptionRecord:
        record = check_pollable(self._subscription_id, await shard.load_subscription())
        # Checked at each term, not only at start: a failover may land on a restored copy.
        await shard.ensure_not_restored()
        return record
