"""The subscription state machine: events in, commands out. No I/O, no clock, no threads.

The steps every event shares (taking outcomes, retries, dispatch, the checkpoint's rule) live
in message_flow.py; this module holds the events and the views the daemon uses.
"""

import itertools
from collections.abc import Sequence

from outbox.positions import START, Position
from poller.subscription.commands import Command, WriteCheckpoint
from poller.subscription.delivery_outcomes import Outcome
from poller.subscription.envelope import Envelope
from poller.subscription.message_flow import MessageFlow
from poller.subscription.settings import SETTINGS_BY_NAME, SubscriptionSettings
from poller.subscription.tracking import MessageState, TrackedMessage


class SubscriptionMachine(MessageFlow):
    """Every delivery decision of one subscription (see the package docstring).

    Each event method takes `now` (seconds, monotonic; an earlier `now` than one already
    seen counts as the latest seen), first fires the timeouts and retries due by then, and
    returns the commands that became possible, in the order the daemon must carry them out.
    """

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
