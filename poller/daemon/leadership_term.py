"""One leadership term of one subscription: the driver around the pure state machine.

Reads feed `messages_read`; the outcomes of each run of deliveries feed `finished` at once; a
ticker feeds `tick` and the starts of running handlers, and renews the lease. Deliver commands
go to the consumers' queues at once (consumers.py); every command that writes
(park, unpark, checkpoint) goes through one queue and one task, so writes happen in the order
the machine emitted them. The term ends when the process stops (graceful: in-flight handlers
finish, the final checkpoint is written), or when the lease or the connection is lost
(abrupt: nothing more is written; the next leader resumes from the stored checkpoint).
"""

import asyncio
import contextlib
import datetime
import logging
import time
from typing import Any

import psycopg

from outbox.positions import Position
from outbox.storable_text import storable_text
from poller.daemon.consumers import Consumers
from poller.daemon.handler_caller import HandlerCaller, payload_message
from poller.daemon.metrics import SubscriptionMetrics
from poller.daemon.notify_listener import NotifyListener
from poller.daemon.options import DaemonOptions
from poller.daemon.poll_interval import AdaptiveInterval
from poller.daemon.runs import Run
from poller.daemon.self_fence import SelfFence
from poller.daemon.stall import StallWatch
from poller.message import Message
from poller.store.leader_store import LeaderStore
from poller.store.records import (
    Blocker,
    LeaseState,
    SkipRequest,
    SubscriptionRecord,
    settings_from_stored,
)
from poller.subscription import (
    Command,
    Deliver,
    Envelope,
    Outcome,
    Park,
    ReplayDone,
    SubscriptionMachine,
    WriteCheckpoint,
)

log = logging.getLogger(__name__)

WriteCommand = Park | ReplayDone | WriteCheckpoint


class LeadershipLost(Exception):  # noqa: N818 - an event the worker handles, not a bug
    """Another process holds the subscription now; stop without writing anything."""


class LeadershipTerm:
    def __init__(
        self,
        store: LeaderStore,
        fence: SelfFence,
        record: SubscriptionRecord,
        caller: HandlerCaller,
        options: DaemonOptions,
        notifications: NotifyListener,
        stop: asyncio.Event,
        metrics: SubscriptionMetrics,
    ) -> None:
        self._store = store
        self._metrics = metrics
        self._fence = fence
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
            report=self._report,
        )
        # The parked row each unfinished replay read, by position: its ReplayDone deletes that
        # row only, never one a later park of the same position wrote.
        self._replayed_rows: dict[Position, datetime.datetime] = {}
        # Replays requested before this term began were for a previous leader; see README.
        self._replay_requests_seen = record.replay_requests
        self._skip_applied: SkipRequest | None = None  # see _skip_if_requested
        # Settings other than the consumer count changed: end this term gracefully and let
        # the worker start a new one with a machine built for the new settings.
        self.restart_requested = False
        # Messages whose handlers did not finish within the shutdown timeout (graceful stop).
        self.abandoned: list[Message] = []
        self._runtime_written: dict[str, Any] | None = None
        # Set when the term ends: deliveries still queued for a handler thread must not start.
        self._over = False
        self._end_term = asyncio.Event()
        # Set when the buffer has room for a worthwhile read (see _read_loop).
        self._room = asyncio.Event()
        self._interval = AdaptiveInterval(
            options.poll_interval_min, options.poll_interval_max, options.hidden_recheck
        )
        self._stall = StallWatch(options.stall_threshold, options.stall_repeat)

    async def run(self) -> None:
        name = self._record.subscription_id
        log.info(
            "leading %s from %s (epoch %s)",
            name,
            self._record.checkpoint,
            self._record.epoch,
            extra={"position": str(self._record.checkpoint), "epoch": self._record.epoch},
        )
        reader = asyncio.create_task(self._read_loop(), name=f"{name}:reader")
        ticker = asyncio.create_task(self._tick_loop(), name=f"{name}:ticker")
        writer = asyncio.create_task(self._write_loop(), name=f"{name}:writer")
        stopping = asyncio.create_task(self._stopped(), name=f"{name}:stop")
        loops = {reader, ticker, writer}
        self._metrics.leading(self.machine)
        try:
            done, _ = await asyncio.wait(loops | {stopping}, return_when=asyncio.FIRST_COMPLETED)
            for task in done & loops:
                task.result()  # a loop only ends by raising: the term is over
            await self._finish_gracefully(reader, ticker, writer)
        finally:
            self._metrics.standing_by()
            self._over = True
            stopping.cancel()
            for task in loops:
                task.cancel()
            await asyncio.gather(*loops, return_exceptions=True)
            await self._consumers.close()

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
        await self._renew()  # so a pending `outbox skip` applies before the first read
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
                self._carry_out(self.machine.messages_read(envelopes, epoch, time.monotonic()))
            hidden = len(batch) < want and await self._watch_hidden(after, batch)
            delay = self._interval.next_delay(found_messages=bool(batch), hidden_messages=hidden)
            if delay:
                await self._notifications.wait(publication, delay)

    def _wake_reader_if_room(self) -> None:
        if self.machine.read_wanted() >= self._worthwhile_read() or not self.machine.buffered_count:
            self._room.set()

    def _worthwhile_read(self) -> int:
        return max(1, min(self._settings.read_batch_size, self._settings.buffer_size // 2))

    async def _watch_hidden(self, after: Position, batch: list[Message]) -> bool:
        """Are committed rows waiting behind the safe frontier? Warn if they wait too long."""
        last = batch[-1].at if batch else after
        oldest_hidden = await self._store.oldest_hidden_transaction(self._record.publication, last)
        now = time.monotonic()
        if self._stall.observe(now, hidden=oldest_hidden is not None) and oldest_hidden:
            await self._warn_stalled(oldest_hidden, self._stall.waited(now))
        return oldest_hidden is not None

    async def _warn_stalled(self, oldest_hidden: int, waited: float) -> None:
        try:
            rows = await self._store.blockers_before(oldest_hidden)
        except psycopg.OperationalError:
            raise  # the connection is gone: the term ends as for any lost connection
        except psycopg.Error as error:
            # A diagnosis only: whatever its query meets (a view changed by hand, a
            # privilege missing), delivery must not stop over it.
            rows = []
            log.warning("cannot name the blockers (%s)", error)
        blockers = [Blocker(*row) for row in rows]
        described = "; ".join(b.describe() for b in blockers) or "none found (already ended?)"
        log.warning(
            "subscription %s: committed messages have waited %.1f s behind the safe frontier"
            " (transaction %s and later); held back by: %s",
            self._record.subscription_id,
            waited,
            oldest_hidden,
            described,
        )

    # Delivering ---------------------------------------------------------------------------

    def _carry_out(self, commands: list[Command]) -> None:
        for command in commands:
            if isinstance(command, Deliver):
                self._consumers.push(command)
            else:
                self._writes.put_nowait(command)

    async def _execute(self, run: Run) -> None:
        if (wait := self._fence.wait_before_start(time.monotonic())) > 0:
            await asyncio.sleep(wait)  # the previous leader's lease has not run out yet
        await self._caller(run, self._may_start)

    def _may_start(self, command: Deliver) -> bool:
        """Asked right before a handler starts, on its thread: a delivery that waited in a
        queue or behind a run may have been sought away, or the term may be over."""
        if self._over:
            return False  # queued for a thread by a term that has ended since
        if not self._fence.may_start(time.monotonic()):
            return False  # the lease may be gone: another process may run this key
        return command.replayed or command.epoch == self.machine.epoch

    def _report(self, outcomes: list[Outcome]) -> None:
        """A run ended: its outcomes, and what it and its queue hand back unstarted."""
        self._carry_out(self.machine.finished(outcomes, time.monotonic()))
        self._wake_reader_if_room()

    def _watch_runs(self, now: float) -> None:
        """Tell the machine what running runs have finished so far (first: each outcome is
        judged by when its call returned, before any deadline fires), which handler calls
        started since the last tick (message_timeout runs from then, not from the Deliver:
        a wait for a thread is not the handler's), let time pass, and withdraw what waits
        behind a call the machine failed at its deadline."""
        outcomes, starts = self._consumers.watch()
        if outcomes:
            self._report(outcomes)
        if starts:
            self._carry_out(self.machine.started(starts, now))
        self._carry_out(self.machine.tick(now))
        if withdrawn := self._consumers.cut_overruns(self.machine.overran):
            self._report(withdrawn)

    # Writing ------------------------------------------------------------------------------

    async def _write_loop(self) -> None:
        while True:
            command = await self._writes.get()
            await self._write(command)
            self._writes.task_done()

    async def _write(self, command: WriteCommand) -> None:
        """Every write carries the epoch the machine issued it under, never the current one:
        a checkpoint queued before a seek and stamped with the seek's epoch once undid it."""
        if isinstance(command, WriteCheckpoint):
            await self._write_checkpoint(command.position, command.epoch)
        elif isinstance(command, Park):
            await self._park(command)
        else:
            parked_at = self._replayed_rows.pop(command.position, None)
            if parked_at is None:
                return  # every replay's row is recorded when it is read; nothing to delete
            if not await self._store.unpark(command.position, parked_at):
                await self._renew()  # fenced out: raises; else purged or parked anew meanwhile

    async def _park(self, command: Park) -> None:
        message = payload_message(command.envelope)
        if command.replayed:
            # Its row is updated (a new parked_at): the next replay request reads it again.
            self._replayed_rows.pop(message.at, None)
        # A replay belongs to no epoch (replays outlive seeks); a stream park to its own.
        epoch = None if command.replayed else command.epoch
        attempts = await self._store.park(epoch, message, command.attempts, command.reason)
        if attempts is None:
            await self._renew()  # fenced out: raises; else a seek ended that epoch: dropped
            return
        self._metrics.parked()
        log.warning(
            "subscription %s parked %r after %d attempts in all: %s",
            self._record.subscription_id,
            message,
            attempts,
            storable_text(command.reason),
            extra={"position": str(message.at), "message_id": message.message_id},
        )
        self._carry_out(self.machine.parked(message.at, command.epoch, time.monotonic()))

    async def _write_checkpoint(self, position: Position, epoch: int) -> None:
        runtime = self._runtime()
        if await self._store.write_checkpoint(epoch, position, runtime):
            self._runtime_written = runtime
            self._carry_out(self.machine.checkpoint_written(position, epoch, time.monotonic()))
            return
        # Fenced out, or the epoch moved under us (a seek): a renewal tells which, and raises
        # or applies the seek (whose own checkpoint write then follows).
        await self._renew()
        if epoch == self.machine.epoch:
            log.error(
                "subscription %s: checkpoint %s refused although this process leads epoch"
                " %s; the stored checkpoint is ahead of it. Restarting the term.",
                self._record.subscription_id,
                position,
                epoch,
            )
            self.restart_requested = True
            self._end_term.set()

    def _runtime(self) -> dict[str, Any]:
        machine = self.machine
        return {
            "consumers": machine.consumers,
            "in_flight": sum(machine.in_flight_by_consumer.values()),
            "in_flight_by_consumer": {str(k): v for k, v in machine.in_flight_by_consumer.items()},
            "retry_queue": machine.retry_queue_length,
            "buffered": machine.buffered_count,
            "draining_keys": sorted(machine.draining_keys)[:100],
            "destination_unavailable": machine.destination_problem,
        }

    # Ticking and renewing -----------------------------------------------------------------

    async def _tick_loop(self) -> None:
        next_renewal = time.monotonic() + self._options.renew_every
        while True:
            await asyncio.sleep(self._options.tick_every)
            if self._fence.lapsed(time.monotonic()):
                # No renewal got through in time (the database is unreachable or slow): stop
                # before a standby may start this subscription's keys.
                raise LeadershipLost(f"{self._record.subscription_id}: lease not renewed in time")
            self._watch_runs(time.monotonic())
            # Room also appears without any handler outcome (a seek drops the buffer).
            self._wake_reader_if_room()
            if time.monotonic() >= next_renewal:
                await self._renew()
                await self._write_runtime_if_changed()
                next_renewal = time.monotonic() + self._options.renew_every

    async def _write_runtime_if_changed(self) -> None:
        """The runtime figures go out with each checkpoint; while no checkpoint moves (idle,
        or a message stuck in flight) they would go stale, so they also follow a renewal."""
        runtime = self._runtime()
        if runtime != self._runtime_written:
            if not await self._store.write_runtime(runtime):
                raise LeadershipLost(self._record.subscription_id)
            self._runtime_written = runtime

    async def _renew(self) -> None:
        sent_at = time.monotonic()
        state = await self._store.renew()
        if state is None:
            raise LeadershipLost(self._record.subscription_id)
        self._fence.renewed(sent_at)
        self._metrics.database_answered()
        now = time.monotonic()
        if state.epoch > self.machine.epoch:
            log.info(
                "subscription %s: seek to %s",
                self._record.subscription_id,
                state.checkpoint,
                extra={"position": str(state.checkpoint), "epoch": state.epoch},
            )
            self._carry_out(self.machine.seek(state.checkpoint, state.epoch, now))
        if state.settings != self._stored_settings:
            self._apply_settings(state.settings, now)
        await self._replay_if_requested(state)
        await self._skip_if_requested(state)

    def _apply_settings(self, stored: dict[str, Any], now: float) -> None:
        changed = settings_from_stored(stored)
        only_consumers = changed.to_mapping() | {"consumers": self._settings.consumers}
        if only_consumers != self._settings.to_mapping():
            log.info("subscription %s: settings changed, restarting", self._record.subscription_id)
            self.restart_requested = True
            self._end_term.set()
            return
        log.info("subscription %s: %s consumers", self._record.subscription_id, changed.consumers)
        self._stored_settings, self._settings = stored, changed
        self._carry_out(self.machine.consumer_count_changed(changed.consumers, now))

    async def _replay_if_requested(self, state: LeaseState) -> None:
        if state.replay_requests == self._replay_requests_seen:
            return
        self._replay_requests_seen = state.replay_requests
        parked = await self._store.parked_messages()
        for message, parked_at in parked:
            # The machine ignores a position whose earlier replay is still unfinished; that
            # replay keeps the row it read.
            self._replayed_rows.setdefault(message.at, parked_at)
        messages = [message for message, _ in parked]
        envelopes = [Envelope(m.at, m.partition_key, m) for m in messages]
        log.info(
            "subscription %s: replay of %d parked", self._record.subscription_id, len(messages)
        )
        self._carry_out(self.machine.replay(envelopes, time.monotonic()))

    # Operator skips (`outbox skip`) -------------------------------------------------------

    async def _skip_if_requested(self, state: LeaseState) -> None:
        """Apply a skip request of this epoch (once per term), and clear it once the stored
        checkpoint has reached it or a seek voided it. Until then it stays stored, so a
        leader that crashes first leaves it to the next one (which applies it again)."""
        request = state.skip_request
        if request is None:
            return
        if request.epoch == self.machine.epoch and request != self._skip_applied:
            self._skip_applied = request
            log.info(
                "subscription %s: skip to %s",
                self._record.subscription_id,
                request.to,
                extra={"position": str(request.to)},
            )
            self._carry_out(self.machine.admin_skip_to(request.to, time.monotonic()))
            self._withdraw_skipped(request.to)
        if request.epoch < state.epoch or state.checkpoint >= request.to:
            await self._store.settle_skip_request(request)

    def _withdraw_skipped(self, to: Position) -> None:
        """Every stream message of this epoch at or before `to` is finished now: withdraw its
        deliveries that wait on a consumer or in a run, so no handler is called for them. The
        ones already started run to their end (their outcome no longer counts)."""
        epoch = self.machine.epoch

        def skipped(command: Deliver) -> bool:
            return (
                not command.replayed
                and command.epoch == epoch
                and not command.envelope.position > to
            )

        if outcomes := self._consumers.take_out(skipped):
            self._report(outcomes)

    # Stopping -----------------------------------------------------------------------------

    async def _finish_gracefully(
        self, reader: asyncio.Task[None], ticker: asyncio.Task[None], writer: asyncio.Task[None]
    ) -> None:
        """Stop reading, let handlers in flight finish (bounded), write the final checkpoint."""
        reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await reader
        if not await self._consumers.wait_idle(self._options.shutdown_timeout):
            self._watch_runs(time.monotonic())  # what the stuck runs finished before
            self.abandoned = [payload_message(c.envelope) for c in self._consumers.delivering()]
            log.error(
                "subscription %s: handlers still running after %g s, stopping without them: %s",
                self._record.subscription_id,
                self._options.shutdown_timeout,
                ", ".join(map(repr, self.abandoned)) or "none in flight (queued for a thread)",
            )
        ticker.cancel()
        writes_done = asyncio.ensure_future(self._writes.join())
        try:
            await asyncio.wait({writes_done, writer}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            writes_done.cancel()  # the writer may have ended first (by raising)
        if writer.done():
            writer.result()
        final = self.machine.final_checkpoint()
        if final is not None:
            await self._write_checkpoint(final.position, final.epoch)
        await self._store.release()
        log.info("stopped %s at %s", self._record.subscription_id, self.machine.checkpoint)
