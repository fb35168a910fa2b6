"""What an operator asks of a leader through the database: replays of parked messages
(`outbox parked replay`, a mark on each parked row) and skips (`outbox skip`, on the
subscription row). The term hands each renewal's state over; this applies what is new to the
machine and keeps what the writes need later. A request stays stored until it is carried out,
so one made while no daemon runs, or that a leader's crash interrupted, is applied by the next
leader."""

import datetime
import logging
import time

from outbox.positions import Position, readable
from poller.daemon.delivery.consumers import Consumers
from poller.daemon.term.term_control import TermControl
from poller.store.records import LeaseState, ReplayRequest, SkipRequest
from poller.store.term_store import TermStore
from poller.subscription import Deliver, Envelope, SubscriptionMachine

log = logging.getLogger(__name__)


class OperatorRequests:
    def __init__(
        self,
        subscription_id: str,
        store: TermStore,
        machine: SubscriptionMachine,
        consumers: Consumers,
        term: TermControl,
    ) -> None:
        self._subscription_id = subscription_id
        self._store = store
        self._machine = machine
        self._consumers = consumers
        self._term = term
        # The request count the marked rows were last read at; None: not yet in this term,
        # whose first renewal reads them (replays asked while no daemon led, or left
        # unfinished by the last term).
        self._replay_requests_seen: int | None = None
        self._replay_ended = False  # a replay ended: a row it kept from the machine may wait
        # The request each unfinished replay read, by position: its ReplayDone deletes that
        # row only, never one a later park of the same position wrote; a park clears only
        # that request.
        self._replaying: dict[Position, ReplayRequest] = {}
        # Every parked row (position, parked_at) handed to the machine in this term: a row
        # read again before its replay's deletion commits is not replayed twice.
        self._handed_over: set[tuple[int, datetime.datetime]] = set()
        self._skip_applied: SkipRequest | None = None  # see skip_if_requested

    def replay_ended(self, position: Position) -> ReplayRequest | None:
        """The request a finished replay read (None if none), forgotten from now on."""
        self._replay_ended = True
        return self._replaying.pop(position, None)

    async def replay_if_requested(self, state: LeaseState) -> None:
        """Hand the marked parked rows of this shard to the machine: at the term's first
        renewal, whenever an operator asked for more, and after a replay ended."""
        if state.replay_requests == self._replay_requests_seen and not self._replay_ended:
            return
        self._replay_requests_seen = state.replay_requests
        self._replay_ended = False
        fresh = []
        for request in await self._store.replay_requests():
            row = (request.message.position, request.parked_at)
            # A replay of the position still runs: its end decides (and reads again).
            if row not in self._handed_over and request.message.at not in self._replaying:
                self._handed_over.add(row)
                self._replaying[request.message.at] = request
                fresh.append(request.message)
        if not fresh:
            return
        envelopes = [Envelope(m.at, m.partition_key, m) for m in fresh]
        log.info("subscription %s: replay of %d parked", self._subscription_id, len(fresh))
        self._term.carry_out(self._machine.replay(envelopes, time.monotonic()))

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
                readable(request.to),
                extra={"position": str(request.to)},
            )
            self._term.carry_out(self._machine.admin_skip_to(request.to, time.monotonic()))
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
            self._term.report(outcomes)
