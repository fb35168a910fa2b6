"""How a message moves through a subscription, below the machine's events: taken from an
outcome (acked, failed, parked, deferred, withdrawn, overrun), retried, queued where its
strategy takes it from, and handed to a consumer (dispatch). `SubscriptionMachine` (machine.py)
is this with its events and views: each event opens with `_begin` (outcomes, deadlines and
retries due by now) and closes with `_settle` (dispatch, then the checkpoint's rule).
"""

import collections
from collections.abc import Sequence

from outbox.positions import START, Position
from poller.subscription.checkpoint_batching import CheckpointBatcher
from poller.subscription.commands import Command, Deliver, Park, ReplayDone
from poller.subscription.consumer_pool import ConsumerPool
from poller.subscription.delivery_outcomes import Outcome, OutcomeKind
from poller.subscription.key_queues import KeyQueues
from poller.subscription.ledger import Ledger
from poller.subscription.retry_timer import RetryTimer
from poller.subscription.settings import Strategy, SubscriptionSettings
from poller.subscription.strict_order import take_in_order
from poller.subscription.timeouts import Deadlines, Overruns, ended_in_time, stands_after_all
from poller.subscription.tracking import Delivery, MessageState, TrackedMessage

_QUEUED = MessageState.QUEUED
_IN_FLIGHT = MessageState.IN_FLIGHT


class MessageFlow:
    """The state of one subscription's messages and deliveries, and every step that moves
    them; the events that drive it are `SubscriptionMachine`'s."""

    def __init__(
        self,
        settings: SubscriptionSettings,
        *,
        now: float,
        start: Position = START,
        epoch: int = 0,
        first_delivery_id: int = 1,
        prefetch: int = 1,
    ) -> None:
        """`prefetch`: deliveries one consumer slot may hold at once. The daemon's consumer
        runs a slot's deliveries one after another in the order given, so several can be
        handed over in one go (a run, or a batch for a batch handler) without a round trip per
        message; order holds because the daemon withdraws everything behind a delivery that
        did not succeed (see `SubscriptionMachine.finished`).
        """
        if prefetch < 1:
            raise ValueError(f"prefetch must be >= 1, got {prefetch!r}")
        self._settings = settings
        self._pinned = settings.strategy is Strategy.PINNED
        self._now = now
        self._epoch = epoch
        self._next_delivery_id = first_delivery_id
        self._ledger: Ledger[TrackedMessage] = Ledger(start)
        self._checkpoints = CheckpointBatcher(settings, start, now)
        self._pool = ConsumerPool(
            settings.strategy, settings.consumers, settings.max_in_flight, prefetch
        )
        self._keys = KeyQueues(settings.consumers)
        self._retries = RetryTimer()
        self._in_flight: dict[int, Delivery] = {}
        self._deadlines = Deadlines(settings.message_timeout)
        self._overruns = Overruns(prefetch)
        self._stream_in_flight = 0
        # Messages any consumer may take (every strategy but pinned, and keyless messages
        # under pinned), in the order they go: replays, then due retries, then fresh reads.
        self._free_replays: collections.deque[TrackedMessage] = collections.deque()
        self._due_retries: collections.deque[TrackedMessage] = collections.deque()
        self._fresh: collections.deque[TrackedMessage] = collections.deque()
        self._parking: dict[tuple[Position, int], list[TrackedMessage]] = {}
        """Messages waiting for parked(position, epoch), by the Park they wait on."""
        self.destination_problem: str | None = None
        """Why the last delivery's destination could not take it (UNAVAILABLE), until one
        succeeds again: the daemon shows it to operators."""
        self._replay_sequence = 0
        self._replays: dict[Position, TrackedMessage] = {}
        """Unfinished replays (queued, in flight, backing off, parking) by parked position."""
        self._touched: set[str] = set()
        """Pinned keys changed by this event, re-examined before dispatching."""
        self._dirty: set[int] = set()
        """Pinned consumers that gained room or a ready key during this event."""
        self._skipped_to = START
        """The furthest admin_skip_to of this epoch: a read begun before it may return rows
        at or before it, which are dropped."""

    def _begin(self, now: float, outcomes: Sequence[Outcome] = ()) -> list[Command]:
        out: list[Command] = []
        self._now = now = max(now, self._now)
        for outcome in outcomes:
            self._take_outcome(outcome, now, out)
        if overran := self._deadlines.due(now):
            self._overrun(overran, out)
        for message in self._retries.pop_due(now):
            self._queue(message)
        return out

    def _take_outcome(self, outcome: Outcome, now: float, out: list[Command]) -> None:
        kind = outcome.kind
        delivery = self._in_flight.get(outcome.delivery_id)
        if delivery is None:
            if self._overruns and kind is not OutcomeKind.WITHDRAWN:
                self._overrun_returned(outcome, out)
            return
        if kind is OutcomeKind.WITHDRAWN:
            if delivery.deadline is None:
                self._withdraw(delivery)
            return
        message = self._end_delivery(delivery)
        if message is None:
            return
        if delivery.deadline is not None and not ended_in_time(delivery, outcome.ended_at, now):
            self._fail(message, self._deadlines.reason(delivery), out)
        elif kind is OutcomeKind.ACKED:
            self._complete(message, out)
            self.destination_problem = None
        elif kind is OutcomeKind.FAILED:
            self._fail(message, outcome.detail, out)
        elif kind is OutcomeKind.UNAVAILABLE:
            self._defer(message)
            self.destination_problem = outcome.detail
        else:
            self._park(message, outcome.detail, out)

    def _overrun(self, overran: list[Delivery], out: list[Command]) -> None:
        """Past their deadline and still running: their messages fail now, but they keep
        their consumer and key until their calls return (see timeouts.py)."""
        for delivery in overran:
            del self._in_flight[delivery.delivery_id]
            message = delivery.message
            if delivery.is_current:
                if not message.replayed:
                    self._stream_in_flight -= 1
                delivery.attempt = message.attempts
                self._fail(message, self._deadlines.reason(delivery), out)
        for consumer, units in self._overruns.add(overran):
            self._pool.hold(consumer, units)

    def _overrun_returned(self, outcome: Outcome, out: list[Command]) -> None:
        """An overrun call returned: its consumer and key are free; its outcome stands only
        if the call beat its deadline after all (see `stands_after_all`)."""
        delivery = self._overruns.pop(outcome.delivery_id)
        if delivery is None:
            return
        self._free(delivery)
        if stands_after_all(delivery, outcome.ended_at):
            if outcome.kind is OutcomeKind.ACKED:
                self._complete(delivery.message, out)
            elif outcome.kind is OutcomeKind.PARK_REQUESTED:
                self._park(delivery.message, outcome.detail, out)

    def _settle(self, out: list[Command]) -> list[Command]:
        self._dispatch(out)
        write = self._checkpoints.due(self._ledger.checkpoint, self._epoch, self._now)
        if write is not None:
            out.append(write)
        return out

    def _dispatch(self, out: list[Command]) -> None:
        if self._touched:
            for key in self._touched:
                owner = self._keys.refresh(key)
                if owner is not None:
                    self._dirty.add(owner)
            self._touched.clear()
        self._drain(self._free_replays, out)
        if self._dirty:
            for consumer in sorted(self._dirty):
                while self._pool.has_capacity(consumer):
                    ready = self._keys.pop_ready(consumer)
                    if ready is None:
                        break
                    self._deliver(ready[0], consumer, out)
            self._dirty.clear()
        if self._pool.single_slot and not self._pinned:
            unfinished = self._ledger.items()
            for message in take_in_order(unfinished, self._pool, self._fresh, self._due_retries):
                self._deliver(message, 0, out)
        else:
            self._drain(self._due_retries, out)
            self._drain(self._fresh, out)

    def _drain(self, queue: collections.deque[TrackedMessage], out: list[Command]) -> None:
        while queue:
            message = queue[0]
            if message.state is not _QUEUED:  # finished by an admin skip meanwhile
                queue.popleft()
                continue
            consumer = self._pool.pick()
            if consumer is None:
                return
            queue.popleft()
            self._deliver(message, consumer, out)

    def _deliver(self, message: TrackedMessage, consumer: int, out: list[Command]) -> None:
        delivery_id = self._next_delivery_id
        self._next_delivery_id += 1
        message.state = _IN_FLIGHT
        message.attempts += 1
        if not message.replayed:
            self._stream_in_flight += 1
        self._in_flight[delivery_id] = Delivery(delivery_id, consumer, message)
        self._pool.take(consumer)
        key = self._pinned_key(message)
        if key is not None:
            self._keys.occupy(key, delivery_id, consumer)
        out.append(
            Deliver(
                consumer,
                message.envelope,
                message.attempts,
                self._epoch,
                delivery_id,
                message.replayed,
            )
        )

    def _end_delivery(self, delivery: Delivery) -> TrackedMessage | None:
        """Free the delivery's consumer and key; its message if its outcome still counts.

        Stale deliveries (seek, admin skip) return None, so a late ack never finishes a
        message that is being retried or moves the checkpoint. The caller moves a returned
        message out of IN_FLIGHT.
        """
        del self._in_flight[delivery.delivery_id]
        if delivery.deadline is not None:
            self._deadlines.remove(delivery)
        self._free(delivery)
        if not delivery.is_current:
            return None
        message = delivery.message
        if not message.replayed:
            self._stream_in_flight -= 1
        return message

    def _free(self, delivery: Delivery) -> None:
        if self._pool.release(delivery.consumer, delivery.held) and self._pinned:
            self._dirty.add(delivery.consumer)
        key = self._pinned_key(delivery.message)
        if key is not None:
            self._keys.release(key, delivery.delivery_id)
            self._touched.add(key)

    def _complete(self, message: TrackedMessage, out: list[Command]) -> None:
        message.state = MessageState.DONE
        if message.replayed:
            del self._replays[message.envelope.position]
            out.append(ReplayDone(message.envelope.position, self._epoch))
        else:
            self._finish_stream(message)
        self._touch(message)

    def _fail(self, message: TrackedMessage, error: str, out: list[Command]) -> None:
        limit = self._settings.max_retry_count
        if message.attempts >= limit:
            # A replay counts its attempts afresh (the parked row adds them to the earlier
            # ones), so its reason says so rather than repeat numbers the row already has.
            kind = "replay attempt" if message.replayed else "attempt"
            self._park(message, f"{error} ({kind} {message.attempts} of {limit})", out)
            return
        self._retries.schedule(message, self._now + self._settings.retry_delay(message.attempts))
        self._touch(message)

    def _defer(self, message: TrackedMessage) -> None:
        """Backs off as a failure does, but the attempt is not counted (see UNAVAILABLE)."""
        message.attempts -= 1
        message.deferrals += 1
        self._retries.schedule(message, self._now + self._settings.retry_delay(message.deferrals))
        self._touch(message)

    def _park(self, message: TrackedMessage, reason: str, out: list[Command]) -> None:
        message.state = MessageState.PARKING
        park = Park(message.envelope, message.attempts, reason, self._epoch, message.replayed)
        self._parking.setdefault((message.envelope.position, self._epoch), []).append(message)
        out.append(park)
        self._touch(message)

    def _withdraw(self, delivery: Delivery) -> None:
        message = self._end_delivery(delivery)
        if message is not None:
            message.attempts -= 1
            self._queue(message, ahead=True)

    def _queue(self, message: TrackedMessage, *, ahead: bool = False) -> None:
        """Queue a due retry, a new replay or (`ahead` of the others) a withdrawn message
        where its strategy takes it from.
        """
        message.state = _QUEUED
        key = self._pinned_key(message)
        if key is not None:
            if message.replayed:
                self._keys.add_replay(message, key, ahead=ahead)
            self._touched.add(key)
        elif message.replayed:
            if ahead:
                self._free_replays.appendleft(message)
            else:
                self._free_replays.append(message)
        elif ahead:
            self._due_retries.appendleft(message)
        else:
            self._due_retries.append(message)

    def _skip(self, message: TrackedMessage) -> None:
        """An admin skip: finished, and a delivery in flight no longer counts (its own end
        frees its consumer and key)."""
        if message.state is _IN_FLIGHT:
            self._stream_in_flight -= 1
        message.state = MessageState.DONE
        self._finish_stream(message)
        self._touch(message)

    def _finish_stream(self, message: TrackedMessage) -> None:
        self._ledger.finish(message.envelope.position)
        self._checkpoints.count_finished(self._now)

    def _touch(self, message: TrackedMessage) -> None:
        key = self._pinned_key(message)
        if key is not None:
            self._touched.add(key)

    def _pinned_key(self, message: TrackedMessage) -> str | None:
        return message.envelope.partition_key if self._pinned else None
