"""One leadership term of one subscription's shard (of a plain subscription: its one lease):
the driver around the pure state machine.

Reads feed `messages_read`; the outcomes of each run of deliveries feed `finished` at once; a
ticker feeds `tick` and the starts of running handlers, and applies what each renewal of the
lease brings (the process's renewer renews it: lease_watch.py). Deliver commands
go to the consumers' queues at once (consumers.py); every command that writes
(park, unpark, checkpoint) goes through one queue and one task, so writes happen in the order
the machine emitted them. The term ends when the process stops (graceful: in-flight handlers
finish, the final checkpoint is written: graceful_end.py), or when the lease or the
connection is lost (abrupt: nothing more is written; the next leader resumes from the stored
checkpoint). A lease not confirmed in time does not end it: it starts nothing until a renewal
finds the lease still its own, then goes on.
"""

import asyncio
import logging
import time
from typing import Any

from outbox.positions import readable
from poller.daemon.delivery.consumers import Consumers
from poller.daemon.delivery.handler_caller import HandlerCaller
from poller.daemon.delivery.runs import Run
from poller.daemon.options import DaemonOptions
from poller.daemon.reporting.metrics import SubscriptionMetrics
from poller.daemon.term.graceful_end import GracefulEnd
from poller.daemon.term.hidden_rows import HiddenRows
from poller.daemon.term.lease_watch import LeaseWatch
from poller.daemon.term.notify_listener import NotifyListener
from poller.daemon.term.operator_requests import OperatorRequests
from poller.daemon.term.other_shards import OtherShards
from poller.daemon.term.poll_interval import AdaptiveInterval
from poller.daemon.term.term_writes import TermWrites, WriteCommand
from poller.membership import Layout
from poller.store.records import LeaseState, SubscriptionRecord, settings_from_stored
from poller.store.term_store import TermStore
from poller.subscription import (
    Command,
    Deliver,
    Envelope,
    Outcome,
    SubscriptionMachine,
)
from poller.waits import cancel_until_done

log = logging.getLogger(__name__)

CANCELLING = 1.0
"""Seconds a statement given up on gets to end when cancelled (see cancel_until_done)."""

RUNTIME_EVERY = 0.1
"""Seconds between the runtime figures a term gives its renewals (see _tick_loop): fresh
enough for subscription_status, and their dict not built on every 20 ms tick."""


def until_next_tick(now: float, every: float) -> float:
    """Seconds to the next multiple of `every` on the loop's clock. Every term of a process
    ticks on the same beat, so the terms of the shards it leads wake in one turn of the event
    loop, not one each: under a CPU-bound `def` handler each turn waits for the GIL (up to
    its 5 ms switch interval) behind the handler threads, and 16 terms ticking out of step
    every 20 ms needed more turns than the loop got, until its lease renewals came too late
    and the leases lapsed."""
    return every - now % every


class LeadershipTerm:
    """Its helpers (operator_requests.py, term_writes.py, graceful_end.py) drive it through
    its public methods, the TermControl it implements (term_control.py)."""

    def __init__(
        self,
        store: TermStore,
        lease: LeaseWatch,
        record: SubscriptionRecord,
        caller: HandlerCaller,
        options: DaemonOptions,
        notifications: NotifyListener,
        stop: asyncio.Event,
        shutdown: asyncio.Event,
        metrics: SubscriptionMetrics,
    ) -> None:
        """`stop` ends the term gracefully (its shard moves away, or the process stops);
        `shutdown` says the process stops, which bounds the wait for handler calls."""
        self._store = store
        self._metrics = metrics
        self._lease = lease
        self._fence = lease.fence
        self._lapsed = False  # the lease was not confirmed in time: said once (see _tick_loop)
        self._record = record
        self._caller = caller
        self._options = options
        self._notifications = notifications
        self._stop = stop
        self._settings = record.settings
        self._stored_settings = record.stored_settings
        batch = caller.batch
        # A batch handler's runs are its batches; other handlers' are `prefetch` long.
        prefetch = options.prefetch if batch is None else batch.max_batch_size
        self.machine = SubscriptionMachine(
            self._settings,
            now=time.monotonic(),
            start=record.checkpoint,
            epoch=record.epoch,
            prefetch=prefetch,
        )
        self._writes: asyncio.Queue[WriteCommand] = asyncio.Queue()
        self._consumers = Consumers(
            slots=self._settings.max_in_flight,
            run_limit=prefetch,
            batch_wait=0.0 if batch is None else batch.max_batch_wait,
            message_timeout=self._settings.message_timeout,
            execute=self._execute,
            report=self.report,
        )
        self._requests = OperatorRequests(
            record.subscription_id, store, self.machine, self._consumers, self
        )
        self._term_writes = TermWrites(
            record.subscription_id, store, self.machine, metrics, self._requests, self
        )
        # Whether this term's shard drained when it began, and whether a change of the count
        # has made it drain since (see _follow_layout).
        self._unit = store.lease.unit
        self._began_draining = record.layout.draining(self._unit)
        self._restart_once_drained = False
        self._runtime_given_at = float("-inf")
        # A shard of a new count during a change starts only once the old shards are done.
        self._barrier_passed = not record.layout.waits_for_barrier(self._unit)
        # Settings other than the consumer count changed: end this term gracefully and let
        # the worker start a new one with a machine built for the new settings.
        self.restart_requested = False
        # Set when the term ends: deliveries still queued for a handler thread must not start.
        self._over = False
        self._end_term = asyncio.Event()
        # Set when the buffer has room for a worthwhile read (see _read_loop).
        self._room = asyncio.Event()
        self._interval = AdaptiveInterval(
            options.poll_interval_min, options.poll_interval_max, options.hidden_recheck
        )
        self._others = OtherShards(notifications, record.publication)
        self._hidden = HiddenRows(store, record.subscription_id, record.publication, options)
        self._ending = GracefulEnd(
            record.subscription_id,
            self,
            store,
            self.machine,
            self._consumers,
            self._writes,
            self._term_writes,
            options,
            shutdown,
        )

    async def run(self) -> None:
        name = self._record.subscription_id
        log.info(
            "leading %s from %s (epoch %s)",
            name,
            readable(self._record.checkpoint),
            self._record.epoch,
            extra={"position": str(self._record.checkpoint), "epoch": self._record.epoch},
        )
        reader = asyncio.create_task(self._read_loop(), name=f"{name}:reader")
        ticker = asyncio.create_task(self._tick_loop(), name=f"{name}:ticker")
        writer = asyncio.create_task(self._write_loop(), name=f"{name}:writer")
        stopping = asyncio.create_task(self._stopped(), name=f"{name}:stop")
        loops = {reader, ticker, writer}
        self._metrics.leading(self.machine, self._unit)
        try:
            done, _ = await asyncio.wait(loops | {stopping}, return_when=asyncio.FIRST_COMPLETED)
            for task in done & loops:
                # A loop only ends by raising (the term is over), or the reader once a drained
                # shard's term restarts.
                task.result()
            await self._ending.finish(reader, ticker, writer)
        finally:
            self._metrics.standing_by(self.machine)
            self._over = True
            stopping.cancel()
            # Again and again: a read or write waiting on a database that does not answer
            # would hold the end of the term for psycopg's own cancel (up to 5 + 5 s).
            ended = asyncio.gather(*loops, return_exceptions=True)
            await cancel_until_done(ended, CANCELLING)
            if ended.done() and not ended.cancelled():
                ended.exception()  # the cancellation it ended with: retrieved, asyncio says nothing
            await self._consumers.close()

    def restart(self) -> None:
        """End this term gracefully; the worker starts a new one from the stored state."""
        self.restart_requested = True
        self._end_term.set()

    async def _stopped(self) -> None:
        stop = asyncio.ensure_future(self._stop.wait())
        end = asyncio.ensure_future(self._end_term.wait())
        try:
            await asyncio.wait({stop, end}, return_when=asyncio.FIRST_COMPLETED)
        finally:  # also when cancelled (a term lost to an error): no pending waiters leak
            stop.cancel()
            end.cancel()

    # Reading ------------------------------------------------------------------------------

    async def _read_loop(self) -> None:
        await self.renew()  # so a pending `outbox skip` applies before the first read
        while not self._barrier_passed:
            await self._wait_for_old_shards()
        publication = self._record.publication
        while True:
            want = min(self.machine.read_wanted(), self._settings.read_batch_size)
            if want < self._worthwhile_read() and self.machine.buffered_count:
                # Reading the one slot each ack frees costs a query per message; wait until a
                # real batch fits (acks set _room), while the buffer still feeds the consumers.
                self._room.clear()
                await self._room.wait()
                continue
            epoch = self.machine.epoch
            after = self.machine.next_read_position
            batch = await self._store.read_batch(publication, after, want)
            if epoch != self.machine.epoch:
                continue  # a seek happened during the read: these rows belong to the old epoch
            if batch:
                envelopes = [Envelope(m.at, m.partition_key, m) for m in batch]
                self.carry_out(self.machine.messages_read(envelopes, epoch, time.monotonic()))
            short = len(batch) < want
            self.carry_out(
                self._others.after_read(self._store.last_safe, self.machine, short=short)
            )
            # A shared read cut by its row limit before the frontier: more may follow at once.
            more = self._store.more_to_read
            if self._restart_once_drained and short and not more and self._all_finished():
                log.info(
                    "subscription %s: shard %s finished all it read up to the barrier; restarting",
                    self._record.subscription_id,
                    self._unit,
                )
                self.restart()
                return  # the term ends gracefully, with nothing to hand back
            # Only an empty read asks whether rows wait behind the frontier: one that found
            # messages reads again soon whatever the answer, and the question cost a round
            # trip per read while messages flow (bench/latency_rounds.py).
            more = more or not short
            hidden = not batch and not more and await self._hidden.watch(after)
            delay = self._interval.next_delay(
                found_messages=bool(batch), hidden_messages=hidden, more=more
            )
            if delay:
                await self._notifications.wait(publication, delay)

    def _wake_reader_if_room(self) -> None:
        if self.machine.read_wanted() >= self._worthwhile_read() or not self.machine.buffered_count:
            self._room.set()

    def _worthwhile_read(self) -> int:
        return max(1, min(self._settings.read_batch_size, self._settings.buffer_size // 2))

    # Delivering ---------------------------------------------------------------------------

    def carry_out(self, commands: list[Command]) -> None:
        for command in commands:
            if isinstance(command, Deliver):
                # Stopping: a retry falling due now would start after the wait for idle
                # handlers, and run on past the final checkpoint and the lease's release.
                # Left unstarted, it stays after the checkpoint for the next leader.
                if not self._ending.begun:
                    self._consumers.push(command)
            else:
                self._writes.put_nowait(command)

    async def _execute(self, run: Run) -> None:
        if (wait := self._fence.wait_before_start(time.monotonic())) > 0:
            await asyncio.sleep(wait)  # the previous leader's lease has not run out yet
        # A lease not confirmed in time: the run waits for a renewal that finds it still this
        # term's, rather than be handed to a thread that may not start it (its deliveries
        # withdrawn and handed out again at once, over and over).
        await self._lease.confirmed()
        await self._caller(run, self._may_start)

    def _may_start(self, command: Deliver) -> bool:
        """Asked right before a handler starts, on its thread: a delivery that waited in a
        queue or behind a run may have been sought away, or the term may be over."""
        if self._over:
            return False  # queued for a thread by a term that has ended since
        if not self._fence.may_start(time.monotonic()):
            return False  # the lease may be gone: another process may run this key
        return command.replayed or command.epoch == self.machine.epoch

    def report(self, outcomes: list[Outcome]) -> None:
        """A run ended: its outcomes, and what it and its queue hand back unstarted."""
        self.carry_out(self.machine.finished(outcomes, time.monotonic()))
        self._wake_reader_if_room()

    def watch_runs(self, now: float) -> None:
        """Tell the machine what running runs have finished so far (first: each outcome is
        judged by when its call returned, before any deadline fires), which handler calls
        started since the last tick (message_timeout runs from then, not from the Deliver:
        a wait for a thread is not the handler's), let time pass, and withdraw what waits
        behind a call the machine failed at its deadline."""
        outcomes, starts = self._consumers.watch()
        if outcomes:
            self.report(outcomes)
        if starts:
            self.carry_out(self.machine.started(starts, now))
        self.carry_out(self.machine.tick(now))
        if withdrawn := self._consumers.cut_overruns(self.machine.overran):
            self.report(withdrawn)

    # Writing ------------------------------------------------------------------------------

    async def _write_loop(self) -> None:
        while True:
            command = await self._writes.get()
            await self._term_writes.write(command)
            self._writes.task_done()

    # Ticking and renewing -----------------------------------------------------------------

    async def _tick_loop(self) -> None:
        tick = self._options.tick_every
        while True:
            await asyncio.sleep(until_next_tick(asyncio.get_running_loop().time(), tick))
            self.watch_runs(time.monotonic())
            # Room also appears without any handler outcome (a seek drops the buffer).
            self._wake_reader_if_room()
            self._say_lapses(time.monotonic())
            # Raises LeadershipLost once a renewal found the lease taken, or none was
            # answered before it could run out.
            if (state := self._lease.news()) is not None:
                await self._follow(state)
            # What the next renewal writes (when it changed): at most RUNTIME_EVERY old when
            # it goes, so the figures a renewal stores are as fresh as a checkpoint's.
            if (now := time.monotonic()) >= self._runtime_given_at + RUNTIME_EVERY:
                self._runtime_given_at = now
                self._lease.give_runtime(self._term_writes.runtime())

    def _say_lapses(self, now: float) -> None:
        """Deliveries stop while the lease is not confirmed in time (self_fence.py): say when
        that begins and ends, which a renewal that finds the lease still this term's does."""
        lapsed = self._fence.lapsed(now)
        if lapsed != self._lapsed:
            self._lapsed = lapsed
            if lapsed:
                log.warning(
                    "%s: no renewal of the lease was confirmed in time; no delivery starts"
                    " until one is",
                    self._record.subscription_id,
                )
            else:
                log.info(
                    "%s: the lease is confirmed again (nobody took it); deliveries go on",
                    self._record.subscription_id,
                )

    async def renew(self) -> None:
        """A renewal now (asked of the process's renewer), and what it brings applied."""
        await self._follow(await self._lease.renewed())

    def runtime_written(self, runtime: dict[str, Any]) -> None:
        """A checkpoint wrote these runtime figures (the lease's renewals need not)."""
        self._lease.runtime_written(runtime)

    async def _follow(self, state: LeaseState) -> None:
        """Apply what a renewal found: a seek, new settings, a change of the shard layout,
        operator requests."""
        self._metrics.database_answered()
        now = time.monotonic()
        if state.epoch > self.machine.epoch:
            log.info(
                "subscription %s: seek to %s",
                self._record.subscription_id,
                readable(state.checkpoint),
                extra={"position": str(state.checkpoint), "epoch": state.epoch},
            )
            self.carry_out(self.machine.seek(state.checkpoint, state.epoch, now))
        if state.settings != self._stored_settings:
            self._apply_settings(state.settings, now)
        if self._follow_layout(state.layout):
            return
        # A draining shard replays nothing (the new shards own every parked message), nor
        # does a new one before the old ones are done: the request waits for it.
        # Nor does a stopping term: it delivers nothing more, and the request would be gone.
        if (
            self._barrier_passed
            and not state.layout.draining(self._unit)
            and not self._ending.begun
        ):
            await self._requests.replay_if_requested(state)
        await self._requests.skip_if_requested(state)

    # A change of the shard count ----------------------------------------------------------

    def _follow_layout(self, layout: Layout) -> bool:
        """A change of the shard count as a renewal shows it; True when the term ends now.

        Its shard newly draining: the database already holds its reads and checkpoints at the
        barrier, so the term delivers on up to there and restarts once it has finished all it
        read (the change waits for that: shard_change_drained). Restarting at once handed back
        what had not started while later messages of other keys had finished, and its
        successor, starting at the checkpoint, delivered those again. Its shard gone from the
        layout (a change ended without it), or no longer draining (ended, and the count made
        again): the term ends now. A move of the checkpoint between the subscription's row
        and a shard row of its own the store follows (LeaderStore.write_checkpoint)."""
        draining = layout.draining(self._unit)
        if layout.has(self._unit) and draining == self._began_draining:
            return False
        if layout.has(self._unit) and draining:
            if not self._restart_once_drained:
                log.info(
                    "subscription %s: shards changed; shard %s delivers up to the barrier,"
                    " then restarts",
                    self._record.subscription_id,
                    self._unit,
                )
                self._restart_once_drained = True
            return False
        log.info("subscription %s: shards changed, restarting", self._record.subscription_id)
        self._term_writes.layout_changed()
        self.restart()
        return True

    def _all_finished(self) -> bool:
        """Every message read is finished (acked or parked): nothing buffered, running or
        waiting for a retry."""
        return self.machine.checkpoint == self.machine.next_read_position

    async def _wait_for_old_shards(self) -> None:
        """Wait until every shard of the old count has finished all its messages up to the
        barrier, no unbounded term of it runs and no transaction older than the change can
        still commit, then end the change (any new shard's leader may; the first one does)."""
        if await self._store.shard_change_drained():
            await self._store.finish_shard_change()
            self._barrier_passed = True
            log.info(
                "subscription %s: old shards done, shard %s starts",
                self._record.subscription_id,
                self._unit,
            )
            return
        await asyncio.sleep(self._options.renew_every)

    def _apply_settings(self, stored: dict[str, Any], now: float) -> None:
        changed = settings_from_stored(stored)
        only_consumers = changed.to_mapping() | {"consumers": self._settings.consumers}
        if only_consumers != self._settings.to_mapping():
            log.info("subscription %s: settings changed, restarting", self._record.subscription_id)
            self.restart()
            return
        log.info("subscription %s: %s consumers", self._record.subscription_id, changed.consumers)
        self._stored_settings, self._settings = stored, changed
        self.carry_out(self.machine.consumer_count_changed(changed.consumers, now))
