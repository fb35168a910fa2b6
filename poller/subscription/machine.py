"""The subscription state machine: events in, commands out. No I/O, no clock, no threads."""

import collections
import itertools
from collections.abc import Sequence

from outbox.positions import START, Position
from poller.subscription.checkpoint_batching import CheckpointBatcher
from poller.subscription.commands import Command, Deliver, Park, ReplayDone, WriteCheckpoint
from poller.subscription.consumer_pool import ConsumerPool
from poller.subscription.envelope import Envelope
from poller.subscription.key_queues import KeyQueues
from poller.subscription.ledger import Ledger
from poller.subscription.outcomes import Outcome, OutcomeKind
from poller.subscription.retry_timer import RetryTimer
from poller.subscription.settings import SETTINGS_BY_NAME, Strategy, SubscriptionSettings
from poller.subscription.strict_order import take_in_order
from poller.subscription.timeouts import Deadlines, Overruns, ended_in_time, stands_after_all
from poller.subscription.tracking import Delivery, MessageState, TrackedMessage

_QUEUED = MessageState.QUEUED
_IN_FLIGHT = MessageState.IN_FLIGHT


class SubscriptionMachine:
    """Every delivery decision of one subscription (see the package docstring).

    Each event method takes `now` (seconds, monotonic; an earlier `now` than one already
    seen counts as the latest seen), first fires the timeouts and retries due by then, and
    returns the commands that became possible, in the order the daemon must carry them out.
    """

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
        did not succeed (see `finished`).
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

    # Views -------------------------------------------------------------------------------

    @property
    def settings(self) -> SubscriptionSettings:
        return self._settings

    @property
    def epoch(self) -> int:
        return self._epoch

    @property
    def consumers(self) -> int:
        return self._pool.count

    @property
    def checkpoint(self) -> Position:
        """The greatest read position with every message at or below it finished."""
        return self._ledger.checkpoint

    @property
    def written_checkpoint(self) -> Position:
        return self._checkpoints.written

    @property
    def next_read_position(self) -> Position:
        """The daemon's next keyset read returns rows after this position."""
        return self._ledger.next_read_position

    @property
    def buffered_count(self) -> int:
        """Unfinished stream messages not in flight: queued, backing off or parking."""
        return len(self._ledger) - self._stream_in_flight

    def read_wanted(self) -> int:
        """How many more messages the buffer takes (the daemon caps it at read_batch_size)."""
        return max(0, self._settings.buffer_size - self.buffered_count)

    @property
    def in_flight_by_consumer(self) -> dict[int, int]:
        return self._pool.loads()

    @property
    def retry_queue_length(self) -> int:
        """Messages backing off before their next attempt."""
        return self._retries.waiting()

    def overran(self, delivery_id: int) -> bool:
        """Whether a delivery failed at its deadline while its handler call still runs."""
        return delivery_id in self._overruns

    @property
    def draining_keys(self) -> frozenset[str]:
        """Pinned keys still in flight on a consumer that no longer owns them."""
        return self._keys.draining()

    # Events ------------------------------------------------------------------------------

    def messages_read(self, envelopes: Sequence[Envelope], epoch: int, now: float) -> list[Command]:
        """Messages from one keyset read, ascending and after next_read_position. Rows at or
        before an `admin_skip_to` target are dropped: the read began before the skip."""
        if epoch != self._epoch:
            if epoch > self._epoch:
                raise ValueError(f"read epoch {epoch} is ahead of the current epoch {self._epoch}")
            # PIP-84: a read that began before a seek must not deliver anything after it.
            return []
        if envelopes and not envelopes[0].position > self._skipped_to:
            envelopes = [e for e in envelopes if e.position > self._skipped_to]
        self._ledger.validate_batch([envelope.position for envelope in envelopes])
        out = self._begin(now)
        for envelope in envelopes:
            position = envelope.position
            message = TrackedMessage(
                envelope, False, (1, position.transaction_id, position.position)
            )
            self._ledger.add(position, message)
            key = envelope.partition_key
            if self._pinned and key is not None:
                self._keys.add_stream(message, key)
                self._touched.add(key)
            else:
                self._fresh.append(message)
        return self._settle(out)

    def finished(self, outcomes: Sequence[Outcome], now: float) -> list[Command]:
        """Deliveries ended, in the order they ended; one event for a whole run or batch, so
        the dispatch and the checkpoint are worked out once for all of them.

        Each is judged by when its call returned (`Outcome.ended_at`), before the deadlines
        due by `now` fire: an ack that beat its deadline counts however late it is reported.
        A late or stale outcome frees its consumer (and key), no more. A withdrawal of a
        delivery whose handler started is ignored (the handler's own outcome follows).
        """
        return self._settle(self._begin(now, outcomes))

    def started(self, calls: Sequence[Sequence[int]], now: float) -> list[Command]:
        """These handler calls began, each a list of delivery ids (one, or a batch's); a
        call of n deliveries may run n times message_timeout from now.

        A sync handler may wait for a thread: timed from Deliver, messages were parked as
        "timed out after 1.0s (attempt 2 of 2)" without their handler ever being called.
        Unknown, ended and already started ids are ignored.
        """
        out = self._begin(now)
        in_flight = self._in_flight
        for call in calls:
            known = [in_flight[i] for i in call if i in in_flight]
            waiting = [delivery for delivery in known if delivery.deadline is None]
            if waiting:
                self._deadlines.start(len(call), waiting, self._now)
        return self._settle(out)

    def tick(self, now: float) -> list[Command]:
        """Time passed: timeouts, due retries, the checkpoint's time rule."""
        return self._settle(self._begin(now))

    def consumer_count_changed(self, consumers: int, now: float) -> list[Command]:
        """Consumers are now 0..consumers-1; deliveries on removed ones run to their end."""
        SETTINGS_BY_NAME["consumers"].check(consumers)
        out = self._begin(now)
        self._pool.set_count(consumers)
        if self._pinned:
            self._touched.update(self._keys.set_consumers(consumers))
            self._dirty.update(range(consumers))
        return self._settle(out)

    def seek(self, to: Position, new_epoch: int, now: float) -> list[Command]:
        """Drop this epoch's stream and resume reading after `to`, which becomes the checkpoint.

        Deliveries in flight stay tracked for their consumer and key until they end (Pulsar
        #25627), but their outcomes no longer count (PIP-84 consumer epoch).
        """
        if new_epoch <= self._epoch:
            raise ValueError(
                f"seek epoch {new_epoch} must be greater than the current epoch {self._epoch}"
            )
        out = self._begin(now)
        for message in self._ledger.items():
            message.state = MessageState.DROPPED
        self._ledger.reset(to)
        self._skipped_to = START
        self._epoch = new_epoch
        self._stream_in_flight = 0
        self._due_retries.clear()
        self._fresh.clear()
        self._parking = {
            park: replays
            for park, waiting in self._parking.items()
            if (replays := [message for message in waiting if message.replayed])
        }
        if self._pinned:
            self._touched.update(self._keys.drop_stream())
        out.append(self._checkpoints.restart(to, new_epoch, self._now))
        return self._settle(out)

    def parked(self, position: Position, epoch: int, now: float) -> list[Command]:
        """A Park(position) issued in `epoch` is durable: every message waiting on it is finished.

        A confirmation of a Park from before a seek never finishes a message of the new
        epoch at the same position: that message's own Park may still be refused or pending.
        """
        out = self._begin(now)
        for message in self._parking.pop((position, epoch), ()):
            if message.state is MessageState.PARKING:
                message.state = MessageState.DONE
                if message.replayed:
                    del self._replays[position]
                else:
                    self._finish_stream(message)
                self._touch(message)
        return self._settle(out)

    def replay(self, envelopes: Sequence[Envelope], now: float) -> list[Command]:
        """Parked messages to deliver again, ahead of the stream; they never touch the
        checkpoint. Under pinned they wait only for their key to be out of flight.

        A position whose earlier replay is unfinished is ignored, so the daemon may pass
        every parked row on each request: two replays of one message queued at once could
        run concurrently on two consumers (a seek once cleared the daemon's own set of
        replaying positions while the machine kept them).
        """
        out = self._begin(now)
        for envelope in envelopes:
            if envelope.position in self._replays:
                continue
            self._replay_sequence += 1
            message = TrackedMessage(envelope, True, (0, self._replay_sequence, 0))
            self._replays[envelope.position] = message
            self._queue(message)
        return self._settle(out)

    def admin_skip(self, position: Position, now: float) -> list[Command]:
        """Finish an unfinished stream message without delivering it (again).

        If it is in flight, its consumer and key stay occupied until that delivery ends.
        Unknown or finished positions are ignored, so the operation can be retried.
        """
        out = self._begin(now)
        message = self._ledger.get(position)
        if message is not None:
            self._skip(message)
        return self._settle(out)

    def admin_skip_to(self, to: Position, now: float) -> list[Command]:
        """`admin_skip` every unfinished stream message at or before `to`, and never deliver
        one at or before `to` that is not read yet: reading resumes after `to` if it had not
        got there (a read already under way is trimmed by `messages_read`).

        Unlike a seek, the epoch stays: messages after `to` keep their state, deliveries of
        them still count, and nothing is read twice. Deliveries of skipped messages keep their
        consumer and key until they end (Pulsar #25627). Idempotent, like `admin_skip`.
        """
        out = self._begin(now)
        skipped = itertools.takewhile(
            lambda message: not message.envelope.position > to, self._ledger.items()
        )
        for message in list(skipped):
            self._skip(message)
        self._ledger.skip_read_to(to)
        self._skipped_to = max(self._skipped_to, to)
        return self._settle(out)

    def checkpoint_written(self, position: Position, epoch: int, now: float) -> list[Command]:
        """WriteCheckpoint(position, epoch) is stored; the next one may be emitted.

        One from an epoch a seek ended is ignored: the seek's own write is the outstanding one.
        """
        out = self._begin(now)
        self._checkpoints.confirm(position, epoch)
        return self._settle(out)

    def final_checkpoint(self) -> WriteCheckpoint | None:
        """At shutdown: the checkpoint to write regardless of the batching rules, if any."""
        return self._checkpoints.force(self._ledger.checkpoint, self._epoch, self._now)

    # Internals ---------------------------------------------------------------------------

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
