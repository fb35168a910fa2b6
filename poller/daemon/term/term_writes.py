"""A term's writes, in the order the machine emitted them: parks, deletions of replayed
parked rows, checkpoints, and the runtime figures that go out with them (and with renewals).
Every one is fenced in SQL; a refused write asks the term to renew, which tells why (raises
when the lease is lost, applies a seek, or ends the term when the shard layout changed)."""

import heapq
import logging
import time
from typing import Any

from outbox.positions import Position, readable
from outbox.storable_text import storable_text
from poller.daemon.delivery.handler_caller import payload_message
from poller.daemon.reporting.metrics import SubscriptionMetrics
from poller.daemon.term.operator_requests import OperatorRequests
from poller.daemon.term.term_control import TermControl
from poller.store.term_store import TermStore
from poller.subscription import Park, ReplayDone, SubscriptionMachine, WriteCheckpoint

log = logging.getLogger(__name__)

WriteCommand = Park | ReplayDone | WriteCheckpoint


class TermWrites:
    def __init__(
        self,
        subscription_id: str,
        store: TermStore,
        machine: SubscriptionMachine,
        metrics: SubscriptionMetrics,
        requests: OperatorRequests,
        term: TermControl,
    ) -> None:
        self._subscription_id = subscription_id
        self._store = store
        self._machine = machine
        self._metrics = metrics
        self._requests = requests
        self._term = term
        self._layout_changed = False  # see layout_changed

    async def write(self, command: WriteCommand) -> None:
        """Every write carries the epoch the machine issued it under, never the current one:
        a checkpoint queued before a seek and stamped with the seek's epoch once undid it."""
        if isinstance(command, WriteCheckpoint):
            await self.write_checkpoint(command.position, command.epoch)
        elif isinstance(command, Park):
            await self._park(command)
        else:
            request = self._requests.replay_ended(command.position)
            if request is None:
                return  # every replay's row is recorded when it is read; nothing to delete
            if not await self._store.unpark(command.position, request.parked_at):
                await self._term.renew()  # fenced out: raises; else purged or parked anew meanwhile

    async def _park(self, command: Park) -> None:
        message = payload_message(command.envelope)
        if command.replayed:
            # A replay belongs to no epoch (replays outlive seeks): its row is updated.
            request = self._requests.replay_ended(message.at)
            assert request is not None  # recorded when its row was read
            attempts = await self._store.repark_replayed(request, command.attempts, command.reason)
        else:
            attempts = await self._store.park(
                command.epoch, message, command.attempts, command.reason
            )
        if attempts is None:
            await self._term.renew()  # fenced out: raises
            if command.replayed:
                # Its row was purged while it was replayed: the operator dropped it for good.
                log.info(
                    "subscription %s: %r was purged while it was replayed; not parked again",
                    self._subscription_id,
                    message,
                    extra={"position": str(message.at), "message_id": message.message_id},
                )
                self._term.carry_out(
                    self._machine.parked(message.at, command.epoch, time.monotonic())
                )
            # else a seek ended that epoch: dropped
            return
        self._metrics.parked()
        log.warning(
            "subscription %s parked %r after %d attempts in all: %s",
            self._subscription_id,
            message,
            attempts,
            storable_text(command.reason),
            extra={"position": str(message.at), "message_id": message.message_id},
        )
        self._term.carry_out(self._machine.parked(message.at, command.epoch, time.monotonic()))

    async def write_checkpoint(self, position: Position, epoch: int) -> bool:
        """False when refused (the term renewed, and restarts if it still leads this epoch)."""
        runtime = self.runtime()
        if await self._store.write_checkpoint(epoch, position, runtime):
            self._term.runtime_written(runtime)
            self._term.carry_out(
                self._machine.checkpoint_written(position, epoch, time.monotonic())
            )
            return True
        # Fenced out, the epoch moved under us (a seek), or the shard layout changed: a
        # renewal tells which, and raises, applies the seek (whose own checkpoint write then
        # follows) or ends the term.
        self._layout_changed = False
        await self._term.renew()
        if not self._layout_changed and epoch == self._machine.epoch:
            log.error(
                "subscription %s: checkpoint %s refused although this process leads epoch"
                " %s; the stored checkpoint is ahead of it. Restarting the term.",
                self._subscription_id,
                readable(position),
                epoch,
            )
            self._term.restart()
        return False

    def layout_changed(self) -> None:
        """The term saw its shard layout change in a renewal: a refused write is explained."""
        self._layout_changed = True

    def runtime(self) -> dict[str, Any]:
        """The figures subscription_status shows, written with each checkpoint and, while no
        checkpoint moves (idle, or a message stuck in flight), by the renewals."""
        machine = self._machine
        return {
            "consumers": machine.consumers,
            "in_flight": sum(machine.in_flight_by_consumer.values()),
            "in_flight_by_consumer": {str(k): v for k, v in machine.in_flight_by_consumer.items()},
            "retry_queue": machine.retry_queue_length,
            "buffered": machine.buffered_count,
            "draining_keys": heapq.nsmallest(100, machine.draining_keys),
            "destination_unavailable": machine.destination_problem,
        }
