"""One leadership term of one subscription: the driver around the pure state machine.

Reads feed `messages_read`; handler outcomes feed `acked`/`failed`/...; a ticker feeds `tick`
and renews the lease. Deliver commands start handler tasks at once; every command that writes
(park, unpark, checkpoint) goes through one queue and one task, so writes happen in the order
the machine emitted them. The term ends when the process stops (graceful: in-flight handlers
finish, the final checkpoint is written), or when the lease or the connection is lost
(abrupt: nothing more is written; the next leader resumes from the stored checkpoint).
"""

import asyncio
import contextlib
import json
import logging
import time
from typing import Any

import psycopg

from outbox.queries import QUERIES
from poller.daemon.handlers import DeliverySuperseded, HandlerCaller
from poller.daemon.lanes import Lanes
from poller.daemon.leases import Lease, LeaseState
from poller.daemon.options import DaemonOptions
from poller.daemon.stall import Blocker, StallWatch
from poller.daemon.waker import Waker
from poller.daemon.wakeup import AdaptiveInterval
from poller.message import Message
from poller.outcomes import ParkMessage, RetryMessage, SkipMessage
from poller.positions import Position
from poller.reader import message_from_row, read_batch_async
from poller.subscription import (
    Command,
    Deliver,
    Envelope,
    Park,
    ReplayDone,
    SubscriptionMachine,
    WriteCheckpoint,
)
from poller.subscription_records import SubscriptionRecord, settings_from_stored

log = logging.getLogger(__name__)

WriteCommand = Park | ReplayDone | WriteCheckpoint


class LeadershipLost(Exception):  # noqa: N818 - an event the worker handles, not a bug
    """Another process holds the subscription now; stop without writing anything."""


class LeaderSession:
    def __init__(
        self,
        conn: psycopg.AsyncConnection[Any],
        read_conn: psycopg.AsyncConnection[Any],
        record: SubscriptionRecord,
        lease: Lease,
        caller: HandlerCaller,
        options: DaemonOptions,
        waker: Waker,
        stop: asyncio.Event,
    ) -> None:
        # Reads get their own connection: a checkpoint commit (an fsync) or a lease renewal on
        # the shared one would otherwise hold the next read back and show in the latency tail.
        self._conn = conn
        self._read_conn = read_conn
        self._record = record
        self._lease = lease
        self._caller = caller
        self._options = options
        self._waker = waker
        self._stop = stop
        self._settings = record.settings
        self._stored_settings = record.stored_settings
        self.machine = SubscriptionMachine(
            self._settings, now=time.monotonic(), start=record.checkpoint, epoch=record.epoch
        )
        self._writes: asyncio.Queue[WriteCommand] = asyncio.Queue()
        self._lanes = Lanes(self._settings.max_in_flight, self._deliver, self._consumer_crashed)
        self._replaying: set[Position] = set()
        # Replays requested before this term began were for a previous leader; see README.
        self._replay_requests_seen = record.replay_requests
        # Settings other than the consumer count changed: end this term gracefully and let
        # the worker start a new one with a machine built for the new settings.
        self.restart_requested = False
        self._end_term = asyncio.Event()
        # Set when the buffer has room for a worthwhile read (see _read_loop).
        self._room = asyncio.Event()
        self._interval = AdaptiveInterval(
            options.poll_interval_min, options.poll_interval_max, options.hidden_recheck
        )
        self._stall = StallWatch(options.stall_threshold, options.stall_repeat)

    async def run(self) -> None:
        name = self._record.subscription_id
        log.info("leading %s from %s (epoch %s)", name, self._record.checkpoint, self._record.epoch)
        reader = asyncio.create_task(self._read_loop(), name=f"{name}:reader")
        ticker = asyncio.create_task(self._tick_loop(), name=f"{name}:ticker")
        writer = asyncio.create_task(self._write_loop(), name=f"{name}:writer")
        stopping = asyncio.create_task(self._stopped(), name=f"{name}:stop")
        loops = {reader, ticker, writer}
        try:
            done, _ = await asyncio.wait(loops | {stopping}, return_when=asyncio.FIRST_COMPLETED)
            for task in done & loops:
                task.result()  # a loop only ends by raising: the term is over
            await self._finish_gracefully(reader, ticker, writer)
        finally:
            stopping.cancel()
            for task in loops:
                task.cancel()
            await asyncio.gather(*loops, return_exceptions=True)
            await self._lanes.close()

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
            batch = await read_batch_async(self._read_conn, publication, after, want)
            if epoch != self.machine.epoch:
                continue  # a seek happened during the read: these rows belong to the old epoch
            if batch:
                envelopes = [Envelope(m.at, m.partition_key, m) for m in batch]
                self._carry_out(self.machine.messages_read(envelopes, epoch, time.monotonic()))
            hidden = len(batch) < want and await self._watch_hidden(after, batch)
            delay = self._interval.next_delay(found_messages=bool(batch), hidden_messages=hidden)
            if delay:
                await self._waker.wait(publication, delay)

    def _wake_reader_if_room(self) -> None:
        if self.machine.read_wanted() >= self._worthwhile_read() or not self.machine.buffered_count:
            self._room.set()

    def _worthwhile_read(self) -> int:
        return max(1, min(self._settings.read_batch_size, self._settings.buffer_size // 2))

    async def _watch_hidden(self, after: Position, batch: list[Message]) -> bool:
        """Are committed rows waiting behind the safe frontier? Warn if they wait too long."""
        last = batch[-1].at if batch else after
        cursor = await self._read_conn.execute(
            QUERIES["oldest_hidden_transaction"],
            {
                "publication": self._record.publication,
                "after_transaction_id": str(last.transaction_id),
                "after_position": last.position,
            },
        )
        row = await cursor.fetchone()
        oldest_hidden: int | None = None if row is None else row[0]
        now = time.monotonic()
        if self._stall.observe(now, hidden=oldest_hidden is not None) and oldest_hidden:
            await self._warn_stalled(oldest_hidden, self._stall.waited(now))
        return oldest_hidden is not None

    async def _warn_stalled(self, oldest_hidden: int, waited: float) -> None:
        cursor = await self._read_conn.execute(
            QUERIES["blocking_transactions_before"], {"transaction_id": str(oldest_hidden)}
        )
        blockers = [Blocker.from_row(row) for row in await cursor.fetchall()]
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
                self._lanes.push(command)
            else:
                self._writes.put_nowait(command)

    def _consumer_crashed(self, consumer: int) -> None:
        self._carry_out(self.machine.consumer_died(consumer, time.monotonic()))

    async def _deliver(self, command: Deliver) -> None:
        message: Message = command.envelope.payload  # type: ignore[assignment]
        if message.delivery_attempt != command.attempt:
            message = message.with_attempt(command.attempt)
        delivery = command.delivery_id

        def wanted() -> bool:  # on the handler's thread, right before it starts
            return command.replayed or command.epoch == self.machine.epoch

        try:
            await self._caller(message, wanted)
        except DeliverySuperseded:  # sought away while it waited for a thread: frees the key
            outcome = self.machine.failed(delivery, "sought away", time.monotonic())
        except RetryMessage:
            outcome = self.machine.requested_retry(delivery, time.monotonic())
        except ParkMessage as request:
            outcome = self.machine.requested_park(delivery, request.reason, time.monotonic())
        except SkipMessage:
            outcome = self.machine.requested_skip(delivery, time.monotonic())
        except Exception as error:  # the handler's failure is data for the machine
            log.debug("handler failed on %r", message, exc_info=True)
            reason = f"{type(error).__name__}: {error}"
            outcome = self.machine.failed(delivery, reason, time.monotonic())
        else:
            outcome = self.machine.acked(delivery, time.monotonic())
        self._carry_out(outcome)
        self._wake_reader_if_room()

    # Writing ------------------------------------------------------------------------------

    async def _write_loop(self) -> None:
        while True:
            command = await self._writes.get()
            await self._write(command)
            self._writes.task_done()

    async def _write(self, command: WriteCommand) -> None:
        subscription = self._record.subscription_id
        if isinstance(command, WriteCheckpoint):
            await self._write_checkpoint(command.position)
        elif isinstance(command, Park):
            message: Message = command.envelope.payload  # type: ignore[assignment]
            await self._conn.execute(
                QUERIES["park_message"],
                {
                    "subscription": subscription,
                    "position": message.position,
                    "transaction_id": str(message.transaction_id),
                    "attempts": command.attempts,
                    "last_error": command.reason,
                },
            )
            self._replaying.discard(message.at)
            log.warning("subscription %s parked %r: %s", subscription, message, command.reason)
            self._carry_out(self.machine.parked(message.at, time.monotonic()))
        else:
            await self._conn.execute(
                QUERIES["unpark_message"],
                {"subscription": subscription, "position": command.position.position},
            )
            self._replaying.discard(command.position)

    async def _write_checkpoint(self, position: Position) -> None:
        cursor = await self._conn.execute(
            QUERIES["write_checkpoint"],
            {
                "subscription": self._record.subscription_id,
                "holder": self._lease.holder,
                "token": self._lease.token,
                "epoch": self.machine.epoch,
                "transaction_id": str(position.transaction_id),
                "position": position.position,
                "runtime": json.dumps(self._runtime()),
            },
        )
        if await cursor.fetchone() is None:
            # Fenced out, or the epoch moved under us (a seek): a renewal tells which, and
            # raises or applies the seek (whose own checkpoint write then follows).
            epoch = self.machine.epoch
            await self._renew()
            if self.machine.epoch == epoch:
                log.error(
                    "subscription %s: checkpoint %s refused although this process leads epoch"
                    " %s; the stored checkpoint is ahead of it. Restarting the term.",
                    self._record.subscription_id,
                    position,
                    epoch,
                )
                self.restart_requested = True
                self._end_term.set()
            return
        self._carry_out(self.machine.checkpoint_written(position, time.monotonic()))

    def _runtime(self) -> dict[str, Any]:
        machine = self.machine
        return {
            "consumers": machine.consumers,
            "in_flight": sum(machine.in_flight_by_consumer.values()),
            "in_flight_by_consumer": {str(k): v for k, v in machine.in_flight_by_consumer.items()},
            "retry_queue": machine.retry_queue_length,
            "buffered": machine.buffered_count,
            "draining_keys": sorted(machine.draining_keys)[:100],
        }

    # Ticking and renewing -----------------------------------------------------------------

    async def _tick_loop(self) -> None:
        next_renewal = time.monotonic() + self._options.renew_every
        while True:
            await asyncio.sleep(self._options.tick_every)
            self._carry_out(self.machine.tick(time.monotonic()))
            # Room also appears without any handler outcome (a seek drops the buffer).
            self._wake_reader_if_room()
            if time.monotonic() >= next_renewal:
                await self._renew()
                next_renewal = time.monotonic() + self._options.renew_every

    async def _renew(self) -> None:
        state = await self._lease.renew(self._conn)
        if state is None:
            raise LeadershipLost(self._record.subscription_id)
        now = time.monotonic()
        if state.epoch > self.machine.epoch:
            log.info("subscription %s: seek to %s", self._record.subscription_id, state.checkpoint)
            self._replaying.clear()
            self._carry_out(self.machine.seek(state.checkpoint, state.epoch, now))
        if state.settings != self._stored_settings:
            self._apply_settings(state.settings, now)
        await self._replay_if_requested(state)

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
        cursor = await self._conn.execute(
            QUERIES["read_parked_messages"], {"subscription": self._record.subscription_id}
        )
        messages = [message_from_row(row) for row in await cursor.fetchall()]
        fresh = [m for m in messages if m.at not in self._replaying]
        self._replaying.update(m.at for m in fresh)
        envelopes = [Envelope(m.at, m.partition_key, m) for m in fresh]
        log.info("subscription %s: replaying %d parked", self._record.subscription_id, len(fresh))
        self._carry_out(self.machine.replay(envelopes, time.monotonic()))

    # Stopping -----------------------------------------------------------------------------

    async def _finish_gracefully(
        self, reader: asyncio.Task[None], ticker: asyncio.Task[None], writer: asyncio.Task[None]
    ) -> None:
        """Stop reading, let handlers in flight finish (bounded), write the final checkpoint."""
        reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await reader
        if not await self._lanes.wait_idle(self._options.shutdown_timeout):
            log.warning(
                "handlers still running after %.0f s; stopping without them",
                self._options.shutdown_timeout,
            )
        ticker.cancel()
        await asyncio.wait(
            {asyncio.ensure_future(self._writes.join()), writer},
            return_when=asyncio.FIRST_COMPLETED,
        )
        if writer.done():
            writer.result()
        final = self.machine.final_checkpoint()
        if final is not None:
            await self._write_checkpoint(final.position)
        await self._lease.release(self._conn)
        log.info("stopped %s at %s", self._record.subscription_id, self.machine.checkpoint)
