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
import shlex
import time

import psycopg
import psycopg.errors

from outbox.archive.errors import ArchiveError
from outbox.positions import readable
from outbox.read_servers import ReadServerRefusedError
from poller.daemon.delivery.handler_caller import HandlerCaller
from poller.daemon.log_context import LEADER_TOKEN, SHARD, SUBSCRIPTION
from poller.daemon.options import DaemonOptions
from poller.daemon.process.subscription_database import ShardConnection, SubscriptionDatabase
from poller.daemon.reporting.metrics import SubscriptionMetrics
from poller.daemon.term.leadership_term import LeadershipTerm
from poller.daemon.term.lease_watch import LeadershipLost, LeaseWatch
from poller.daemon.term.notify_listener import NotifyListener
from poller.daemon.term.self_fence import SelfFence
from poller.membership import ONLY_SHARD, ShardUnit
from poller.operations.pollable import NotPollableError, check_pollable
from poller.reconnect import Backoff, failure_line
from poller.store.records import Lease, SubscriptionRecord
from poller.store.restore_check import RestoredDatabaseError
from poller.store.retired_positions import RetiredPositionError
from poller.waits import Stopped, wait_event

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
        # After an unexpected error: 2 s doubling to 30 s, reset by a term that ran 30 s.
        self._failure_pause = Backoff(first=2.0, longest=30.0)
        # After a connection error (the reconnect policy's backoff): a statement refused on a
        # connection that stays open (a standby's recovery conflict) is not retried in a loop.
        self._lost_pause = Backoff()

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
                        self._failure_pause.succeeded(time.monotonic())
                        self._lost_pause.succeeded(time.monotonic())
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
            except Stopped:
                return  # told to stop while the database was unreachable
            except LeadershipLost as error:
                log.warning("lost leadership of %s (%s); standing by", self._name, error)
            except psycopg.OperationalError as error:
                doing = "standing by for" if LEADER_TOKEN.get() is None else "leading"
                log.warning(
                    "connection lost while %s %s: %s", doing, self._name, failure_line(error)
                )
                await wait_event(stop, self._lost_pause.failed(time.monotonic()))
            except psycopg.errors.ForeignKeyViolation:
                # Deleted under a running daemon (its lease row went with it): this worker
                # ends, the process and its other subscriptions go on.
                log.error(
                    "%s: the subscription was deleted; its worker stops", self._subscription_id
                )
                return
            except (NotPollableError, RestoredDatabaseError) as error:
                log.error("%s; its worker stops", error)
                return
            except ReadServerRefusedError as error:
                # Promoted under a running daemon (a failover, a split brain): nothing is read
                # until the read server is a standby of the primary again, or is the primary.
                pause = self._failure_pause.failed(time.monotonic())
                log.error(
                    "%s: %s; no message is read from it (checking again in %.0f s)",
                    self._name,
                    error,
                    pause,
                )
                await wait_event(stop, pause)
            except ArchiveError as error:
                # The archive this subscription reads (it starts below the retired-up-to
                # mark) cannot be read now: a file missing or damaged, which a restore from
                # a backup can mend. Nothing is delivered past it; try again later.
                pause = self._failure_pause.failed(time.monotonic())
                log.error(
                    "%s: %s; nothing after it is delivered (trying again in %.0f s)",
                    self._name,
                    error,
                    pause,
                )
                await wait_event(stop, pause)
            except RetiredPositionError as error:
                # Reading on would skip what retention dropped: stop where an operator sees it
                # rather than deliver around a hole (catch-up subscriptions raise it too).
                log.error(
                    "%s stops: %s. Nothing after %s is delivered until an operator decides:"
                    " `outbox seek %s --to %s` accepts the loss, then restart `outbox poll`",
                    self._name,
                    error,
                    readable(error.after),
                    shlex.quote(self._subscription_id),
                    error.mark,
                )
                return
            except Exception:
                # A bug, not the subscription's fault: no single failure may stop delivery for
                # good, so the worker starts over from the stored checkpoint after a pause.
                pause = self._failure_pause.failed(time.monotonic())
                log.exception(
                    "%s: worker failed; starting again in %.0f s", self._subscription_id, pause
                )
                await wait_event(stop, pause)
            await self._wait_for_last_calls(stop)

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
