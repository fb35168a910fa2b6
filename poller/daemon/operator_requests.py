"""What an operator asks of a running leader through the subscription row: replays of parked
messages (`outbox parked replay`) and skips (`outbox skip`). The term hands each renewal's
state over; this applies what is new to the machine and keeps what the writes need later."""

import datetime
import logging
import time
from collections.abc import Callable

from outbox.positions import Position
from poller.daemon.consumers import Consumers
from poller.store.leader_store import LeaderStore
from poller.store.records import LeaseState, SkipRequest
from poller.subscription import Command, Deliver, Envelope, Outcome, SubscriptionMachine

log = logging.getLogger(__name__)


class OperatorRequests:
    def __init__(
        self,
        subscription_id: str,
        store: LeaderStore,
        machine: SubscriptionMachine,
        consumers: Consumers,
        carry_out: Callable[[list[Command]], None],
        report: Callable[[list[Outcome]], None],
        replay_requests: int,
    ) -> None:
        self._subscription_id = subscription_id
        self._store = store
        self._machine = machine
        self._consumers = consumers
        self._carry_out = carry_out
        self._report = report
        # Replays requested before this term began were for a previous leader; see README.
        self._replay_requests_seen = replay_requests
        # The parked row each unfinished replay read, by position: its ReplayDone deletes that
        # row only, never one a later park of the same position wrote.
        self._replayed_rows: dict[Position, datetime.datetime] = {}
        self._skip_applied: SkipRequest | None = None  # see skip_if_requested

    def replayed_row(self, position: Position) -> datetime.datetime | None:
        """The parked row a finished replay read (None if none), forgotten from now on."""
        return self._replayed_rows.pop(position, None)

    async def replay_if_requested(self, state: LeaseState) -> None:
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
        log.info("subscription %s: replay of %d parked", self._subscription_id, len(messages))
        self._carry_out(self._machine.replay(envelopes, time.monotonic()))

    async def skip_if_requested(self, state: LeaseState) -> None:
        """Apply a skip request of this epoch (once per term), and clear it once the stored
        checkpoint has reached it or a seek voided it. Until then it stays stored, so a
        leader that crashes first leaves it to the next one (which applies it again)."""
        request = state.skip_request
        if request is None:
            return
        if request.epoch == self._machine.epoch and request != self._skip_applied:
            self._skip_applied = request
            log.info(
                "subscription %s: skip to %s",
                self._subscription_id,
                request.to,
                extra={"position": str(request.to)},
            )
            self._carry_out(self._machine.admin_skip_to(request.to, time.monotonic()))
            self._withdraw_skipped(request.to)
        if request.epoch < state.epoch or state.checkpoint >= request.to:
            await self._store.settle_skip_request(request)

    def _withdraw_skipped(self, to: Position) -> None:
        """Every stream message of this epoch at or before `to` is finished now: withdraw its
        deliveries that wait on a consumer or in a run, so no handler is called for them. The
        ones already started run to their end (their outcome no longer counts)."""
        epoch = self._machine.epoch

        def skipped(command: Deliver) -> bool:
            return (
                not command.replayed
                and command.epoch == epoch
                and not command.envelope.position > to
            )

        if outcomes := self._consumers.take_out(skipped):
            self._report(outcomes)
