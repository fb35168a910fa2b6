"""Stateful property tests: random event sequences against a plain reference model.

The model follows the commands the machine returns and checks, after every step: (a) the
checkpoint equals the greatest read position with everything at or below it finished, so it
never passes an unfinished message and only goes back at a seek; (b) under pinned, one
delivery per key at a time (old-epoch ones included) on the key's owner, in Position order;
(c) nothing of an old epoch is delivered or counted after a seek; (d) after a crash every
message unfinished at the crash is delivered again; (e) keep acking and everything finishes.
Also exact: which consumer each strategy picks, no retry before its backoff, no consumer
idle while a message it may take is ready, Park/ReplayDone/WriteCheckpoint when, and only
when, due. The store applies the write commands in order and refuses one whose epoch is not
its own (a seek sets it): its checkpoint never passes an unfinished message of the current
epoch, and a crash rebuilds the machine from it. After a seek, everything after the seek
target is delivered again.
"""

import collections
import dataclasses
from collections.abc import Callable
from typing import ClassVar

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from poller.subscription import (
    START,
    Command,
    Deliver,
    Envelope,
    Park,
    Position,
    ReplayDone,
    Strategy,
    SubscriptionMachine,
    SubscriptionSettings,
    WriteCheckpoint,
    owner_of,
)
from poller.subscription.delivery_outcomes import Outcome, OutcomeKind
from tests.unit.subscription.support import (
    acked,
    failed,
    requested_park,
    requested_retry,
    requested_skip,
    unavailable,
    withdrawn,
)

KEYS = ("a", "b", "c", "d", None)
TIMEOUT = 5.0
OUTCOMES = ("ack", "fail", "retry", "park", "skip", "unavailable")
OUTCOME_EVENTS = {
    "ack": (OutcomeKind.ACKED, ""),
    "skip": (OutcomeKind.ACKED, ""),
    "fail": (OutcomeKind.FAILED, "boom"),
    "retry": (OutcomeKind.FAILED, "retry requested by the handler"),
    "park": (OutcomeKind.PARK_REQUESTED, "poison"),
    "unavailable": (OutcomeKind.UNAVAILABLE, "broker down"),
}
CHORES = (
    "park_is_durable",
    "checkpoint_is_stored",
    "replay_parked",
    "admin_skips",
    "duplicate_ack",
    "read_in_a_stale_epoch",
    "shutdown_checkpoint",
    "handlers_start",
    "withdraw",
)
DISRUPTIONS = ("seek", "crash", "consumer_count_changes")
QUIET_STEPS = 5
"""Machine events between two disruptions, so that work gets done in between."""


@dataclasses.dataclass(eq=False)
class ModelMessage:
    """A stream message read in the current epoch, as the model sees it."""

    envelope: Envelope
    finished: bool = False
    parking: bool = False
    attempts: int = 0
    deferrals: int = 0
    """Deliveries its destination could not take: they time its backoff, not its parking."""
    current: int | None = None
    """The delivery whose outcome counts, while one is in flight."""
    due: float = 0.0
    """When a failed attempt may be retried."""

    def ready(self, now: float) -> bool:
        return not self.finished and not self.parking and self.current is None and self.due <= now


@dataclasses.dataclass(eq=False)
class ModelReplay:
    envelope: Envelope
    parking: bool = False
    park_epoch: int = 0
    attempts: int = 0
    deferrals: int = 0
    current: int | None = None
    due: float = 0.0

    def ready(self, now: float) -> bool:
        return not self.parking and self.current is None and self.due <= now


@dataclasses.dataclass(eq=False)
class Flight:
    """A delivery the machine still tracks: not acked, failed, timed out or died."""

    delivery_id: int
    consumer: int
    envelope: Envelope
    deadline: float | None
    """None until its handler starts: only then does message_timeout run."""
    stream: ModelMessage | None
    replay: ModelReplay | None
    in_order: bool = False
    """Delivered with one consumer and one slot since the last seek, crash or count change."""
    overran: bool = False
    """Its handler ran past message_timeout and has not returned: its message failed at the
    deadline, but it keeps its consumer's slot and its key until it answers."""


class SubscriptionModel(RuleBasedStateMachine):
    strategies: ClassVar[tuple[Strategy, ...]] = tuple(Strategy)
    prefetch_choices: ClassVar[tuple[int, ...]] = (1,)
    consumer_choices: ClassVar[tuple[int, ...]] = (1, 2, 3)
    max_in_flight_choices: ClassVar[tuple[int, ...]] = (1, 2)

    @initialize(data=st.data())
    def start(self, data: st.DataObject) -> None:
        min_count = data.draw(st.integers(1, 3), "min_checkpoint_count")
        self.settings = SubscriptionSettings(
            strategy=data.draw(st.sampled_from(self.strategies), "strategy"),
            consumers=data.draw(st.sampled_from(self.consumer_choices), "consumers"),
            max_in_flight=data.draw(st.sampled_from(self.max_in_flight_choices), "max_in_flight"),
            message_timeout=TIMEOUT,
            max_retry_count=data.draw(st.integers(1, 3), "max_retry_count"),
            retry_backoff_initial=0.5,
            retry_backoff_max=2.0,
            read_batch_size=4,
            buffer_size=data.draw(st.integers(2, 10), "buffer_size"),
            checkpoint_after=3.0,
            min_checkpoint_count=min_count,
            max_checkpoint_count=min_count + data.draw(st.integers(0, 3), "extra"),
        )
        self.pinned = self.settings.strategy is Strategy.PINNED
        self.prefetch = data.draw(st.sampled_from(self.prefetch_choices), "prefetch")
        self.now = 0.0
        self.outbox: list[Envelope] = []
        self.epoch = 0
        self.written = START
        self.store_epoch, self.store_checkpoint = 0, START
        self.write_queue: list[tuple[Position, int]] = []
        """WriteCheckpoint commands not yet applied to the store, in the order emitted."""
        # Rows parked by an earlier run, so replays need no long run-up.
        parked_keys = data.draw(st.lists(st.sampled_from(KEYS), max_size=3), "parked keys")
        self.parked_rows = {
            Position(0, i): Envelope(Position(0, i), key) for i, key in enumerate(parked_keys, 1)
        }
        self.owed: set[Position] = set()
        self.answered: list[int] = []
        self.next_delivery_id = 1
        self.quiet = 0
        self.last_start: Position | None = None
        """The last in-order stream handler start (see Flight.in_order)."""
        self._restart(START)

    def _restart(self, start: Position) -> None:
        """A fresh machine, as the daemon builds after a crash, from the stored checkpoint."""
        self.machine = SubscriptionMachine(
            self.settings,
            now=self.now,
            start=start,
            epoch=self.epoch,
            first_delivery_id=self.next_delivery_id,
            prefetch=self.prefetch,
        )
        self.consumers = self.settings.consumers
        self.last_start = None  # a new machine: its flights are new too
        self.start_position = start
        self.read: dict[Position, ModelMessage] = {}
        self.flights: dict[int, Flight] = {}
        self.hand: set[int] = set()
        """Deliveries whose handler has not answered; timed-out ones included."""
        self.replays: dict[Position, ModelReplay] = {}
        self.pending_parks: dict[tuple[Position, int], Envelope] = {}
        self.pending_write: tuple[Position, int] | None = None
        """The write the machine waits on (one at a time), as (position, epoch)."""
        self.requested = start
        self.last_request_at = self.now
        self.machine_now = self.now
        """The latest `now` the machine was given."""
        self.finished_since_request = 0
        self.last_finished_at = self.now
        self.acked_order: dict[str, Position] = {}
        self.last_picked = -1
        self.floor = start
        self.expected_parks: list[tuple[Position, bool, int, int]] = []
        """Park commands due: position, replayed, attempts, and the epoch it was issued in."""
        self.expected_replay_done: list[Position] = []

    # The reference model ------------------------------------------------------------------

    def expected_checkpoint(self) -> Position:
        checkpoint = self.start_position
        for position, message in self.read.items():
            if not message.finished:
                break
            checkpoint = position
        return checkpoint

    def _expire(self) -> None:
        """The timeouts the machine fires in any event at `now`: the message fails, the
        handler runs on (overran) and holds its slot and key."""
        for flight in self.flights.values():
            if flight.deadline is not None and flight.deadline <= self.now and not flight.overran:
                flight.overran = True
                self._decide(flight, "fail")

    def _end(self, flight: Flight, outcome: str) -> None:
        """The handler answered: an overran one only frees its slot and key."""
        del self.flights[flight.delivery_id]
        if not flight.overran:
            self._decide(flight, outcome)

    def _decide(self, flight: Flight, outcome: str) -> None:
        limit = self.settings.max_retry_count
        position = flight.envelope.position
        target: ModelMessage | ModelReplay | None = flight.stream or flight.replay
        if target is None or target.current != flight.delivery_id:
            return  # a stale delivery: it frees its consumer and key, nothing else
        target.current = None
        if outcome in ("ack", "skip"):
            if isinstance(target, ModelMessage):
                self._finish(target, by_handler=True)
            else:
                del self.replays[position]
                self.expected_replay_done.append(position)
        elif outcome == "unavailable":
            target.attempts -= 1  # not an attempt: an outage never parks a message
            target.deferrals += 1
            target.due = self.now + self.settings.retry_delay(target.deferrals)
        elif outcome == "park" or target.attempts >= limit:
            target.parking = True
            replayed = isinstance(target, ModelReplay)
            if isinstance(target, ModelReplay):
                target.park_epoch = self.epoch
            self.expected_parks.append((position, replayed, target.attempts, self.epoch))
        else:
            target.due = self.now + self.settings.retry_delay(target.attempts)

    def _finish(self, message: ModelMessage, *, by_handler: bool) -> None:
        message.finished = True
        message.parking = False
        message.current = None
        self.finished_since_request += 1
        self.last_finished_at = self.now
        key = message.envelope.partition_key
        if by_handler and self.pinned and key is not None:
            last = self.acked_order.get(key)
            position = message.envelope.position
            assert last is None or last < position, f"key {key}: {position} acked after {last}"
            self.acked_order[key] = position

    def _write_due(self) -> bool:
        s = self.settings
        return (
            self.pending_write is None
            and self.expected_checkpoint() != self.requested
            and (
                self.finished_since_request >= s.max_checkpoint_count
                or (
                    self.finished_since_request >= s.min_checkpoint_count
                    and self.now - self.last_request_at >= s.checkpoint_after
                )
                or self.now - self.last_finished_at >= s.checkpoint_after  # idle
            )
        )

    def _call(
        self, event: Callable[[], list[Command]], *, forced_write: bool = False
    ) -> list[Position]:
        """Run one machine event, check every command it returned; returns its writes."""
        self.quiet += 1
        self.machine_now = self.now
        write_due = self._write_due()
        commands = event()
        parks: list[tuple[Position, bool, int, int]] = []
        done: list[Position] = []
        writes: list[Position] = []
        for command in commands:
            if isinstance(command, Deliver):
                self._on_deliver(command)
            elif isinstance(command, Park):
                envelope = command.envelope
                parks.append((envelope.position, command.replayed, command.attempts, command.epoch))
                self.pending_parks[envelope.position, command.epoch] = envelope
            elif isinstance(command, ReplayDone):
                assert command.epoch == self.epoch
                done.append(command.position)
                del self.parked_rows[command.position]
            else:
                assert isinstance(command, WriteCheckpoint)
                assert command.epoch == self.epoch
                writes.append(command.position)
                self.write_queue.append((command.position, command.epoch))
        assert sorted(parks) == sorted(self.expected_parks)
        assert sorted(done) == sorted(self.expected_replay_done)
        self.expected_parks, self.expected_replay_done = [], []
        assert len(writes) <= 1, writes
        if not forced_write:
            assert bool(writes) == write_due, (writes, self.finished_since_request)
        for position in writes:
            assert position == self.expected_checkpoint()
            self.requested, self.pending_write = position, (position, self.epoch)
            self.last_request_at = self.now
            self.finished_since_request = 0
        self._assert_no_consumer_idles_while_work_is_ready()
        self._cut_behind_overruns()
        return writes

    def _cut_behind_overruns(self) -> None:
        """One slot run in order: what waits behind a handler that overran cannot start
        until it returns, so the daemon hands it back (withdrawn) at its next tick: what
        waits on that handler's consumer, not another's (after a change of the consumer
        count, an old consumer's overran call and a new consumer's deliveries coexist)."""
        if not self._fifo():
            return
        held = {f.consumer for f in self.flights.values() if f.overran}
        stuck = [f for f in self.flights.values() if f.deadline is None and f.consumer in held]
        if not stuck:
            return
        for flight in stuck:
            self.hand.discard(flight.delivery_id)
            self._end_withdrawn(flight)
        outcomes = [Outcome(f.delivery_id, OutcomeKind.WITHDRAWN) for f in stuck]
        self._call(lambda: self.machine.finished(outcomes, self.now))

    def _strict(self) -> bool:
        """One consumer with one slot: the stream goes strictly in Position order."""
        return not self.pinned and self.consumers == 1 and self.settings.max_in_flight == 1

    def _has_room(self, consumer: int) -> bool:
        """An overran handler fills its slot (`prefetch` deliveries' worth) until it returns."""
        load = sum(
            self.prefetch if flight.overran else 1
            for flight in self.flights.values()
            if flight.consumer == consumer
        )
        return consumer < self.consumers and load < self.settings.max_in_flight * self.prefetch

    def _in_order_ready(self) -> list[ModelMessage]:
        """One slot: the ready messages right behind the in-flight prefix of the stream (all
        of it on consumer 0, which runs its deliveries in order), as the machine walks it."""
        ahead_in_order = all(flight.consumer == 0 for flight in self.flights.values())
        ready: list[ModelMessage] = []
        for message in self.read.values():
            if message.finished:
                continue
            if message.current is not None:
                if ready or not ahead_in_order:
                    return []
                continue
            if not message.ready(self.now):
                break
            ready.append(message)
        return ready

    def _fifo(self) -> bool:
        """The daemon's consumer runs a slot's deliveries in order: with one slot and
        prefetch, handlers start and answer in delivery order, and a delivery that did not
        succeed takes the ones queued behind it back (withdrawn)."""
        return self._strict() and self.prefetch > 1

    def _queued_behind(self, delivery_id: int) -> list[int]:
        return sorted(i for i, f in self.flights.items() if i > delivery_id and f.deadline is None)

    def _expected_free_consumer(self) -> int:
        """dispatch-to-single: the lowest with room; otherwise the next after the last picked."""
        with_room = [c for c in range(self.consumers) if self._has_room(c)]
        if self.settings.strategy is Strategy.DISPATCH_TO_SINGLE:
            return with_room[0]
        return next((c for c in with_room if c > self.last_picked), with_room[0])

    def _assert_no_consumer_idles_while_work_is_ready(self) -> None:
        """A consumer with room never waits while a message it may take is ready."""
        waiting: list[ModelMessage | ModelReplay] = [*self.read.values(), *self.replays.values()]
        ready = [message for message in waiting if message.ready(self.now)]
        if self._strict():
            in_order = self._in_order_ready()
            ready = [m for m in ready if isinstance(m, ModelReplay) or m in in_order]
        if not self.pinned:
            assert not ready or not any(map(self._has_room, range(self.consumers))), ready
            return
        busy_keys = {f.envelope.partition_key for f in self.flights.values()}
        blocked: set[str | None] = set()  # keys whose oldest unfinished message is not ready
        for stream in self.read.values():
            key = stream.envelope.partition_key
            if key is not None and not stream.finished and not stream.ready(self.now):
                blocked.add(key)
        for candidate in ready:
            key = candidate.envelope.partition_key
            if key is None:
                assert not any(map(self._has_room, range(self.consumers))), candidate
            elif key not in busy_keys and (
                isinstance(candidate, ModelReplay) or key not in blocked
            ):
                assert not self._has_room(owner_of(key, self.consumers)), candidate

    def _on_deliver(self, command: Deliver) -> None:
        envelope, consumer = command.envelope, command.consumer
        position, key = envelope.position, envelope.partition_key
        assert command.epoch == self.epoch
        assert 0 <= consumer < self.consumers
        assert self._has_room(consumer)
        assert 1 <= command.attempt <= self.settings.max_retry_count
        assert command.delivery_id not in self.flights
        if self.pinned and key is not None:
            assert consumer == owner_of(key, self.consumers)
            in_flight = [
                f.envelope for f in self.flights.values() if f.envelope.partition_key == key
            ]
            assert not in_flight, f"key {key} delivered while {in_flight} in flight"
        else:
            assert consumer == self._expected_free_consumer()
            self.last_picked = consumer
        stream, replay = None, None
        if command.replayed:
            replay = self.replays[position]
            assert replay.ready(self.now), replay
            assert command.attempt == replay.attempts + 1
            replay.attempts += 1
            replay.current = command.delivery_id
        else:
            stream = self.read[position]  # KeyError: not read in this epoch (PIP-84)
            assert stream.envelope == envelope
            assert stream.ready(self.now), stream  # never before its retry delay
            assert command.attempt == stream.attempts + 1
            if self.pinned and key is not None:
                earlier = [
                    p
                    for p, m in self.read.items()
                    if p < position and m.envelope.partition_key == key and not m.finished
                ]
                assert not earlier, f"{position} of key {key} delivered before {earlier}"
            if self._strict():
                earlier = [
                    p
                    for p, m in self.read.items()
                    if p < position and not m.finished and (self.prefetch == 1 or m.current is None)
                ]
                assert not earlier, f"one slot: {position} delivered before {earlier}"
            stream.attempts += 1
            stream.current = command.delivery_id
            self.owed.discard(position)
        self.flights[command.delivery_id] = Flight(
            command.delivery_id, consumer, envelope, None, stream, replay, self._strict()
        )
        self.hand.add(command.delivery_id)
        self.next_delivery_id = max(self.next_delivery_id, command.delivery_id + 1)

    # Rules: few, so that hypothesis' swarm testing (which disables a random subset of rules
    # per example) rarely leaves an example with nothing but appends; the variety is in the
    # drawn kind of chore or disruption.

    @rule(count=st.integers(1, 6), data=st.data())
    def append(self, count: int, data: st.DataObject) -> None:
        """Commit rows to the outbox: ascending (transaction_id, position), random gaps."""
        last = self.outbox[-1].position if self.outbox else Position(1, 1)
        for _ in range(count):
            if data.draw(st.booleans(), "new transaction"):
                step = data.draw(st.integers(1, 3), "transaction step")
                delta = data.draw(st.integers(-3, 3), "position delta")
                last = Position(last.transaction_id + step, max(1, last.position + delta))
            else:
                last = Position(last.transaction_id, last.position + data.draw(st.integers(1, 3)))
            key = data.draw(st.sampled_from(KEYS), "key")
            self.outbox.append(Envelope(last, key, payload=len(self.outbox)))

    @precondition(lambda self: self._unread())
    @rule(count=st.integers(1, 6))
    def daemon_reads(self, count: int) -> None:
        batch = self._unread()[: min(count, self.machine.read_wanted())]
        if batch:
            self._read(batch)

    @precondition(lambda self: self.hand)
    @rule(data=st.data(), count=st.integers(1, 3))
    def handler_answers(self, data: st.DataObject, count: int) -> None:
        """A run of outcomes reported in one event, in the order the handlers ended."""
        answers: list[tuple[int, str]] = []
        for _ in range(count):
            left = sorted(self.hand - {i for i, _ in answers})
            if not left:
                break
            # A slot run in order answers its oldest delivery first.
            in_order = self._fifo()
            delivery_id = left[0] if in_order else data.draw(st.sampled_from(left), "delivery")
            outcome = data.draw(st.sampled_from(OUTCOMES), "outcome")
            answers.append((delivery_id, outcome))
            if self._fifo() and outcome not in ("ack", "skip"):
                break  # a run stops at its first delivery that did not succeed
        self._answer_run(answers)

    @rule(seconds=st.sampled_from([0.1, 0.5, 1.0, 2.0, 3.0, 5.0, 7.0]), tick=st.booleans())
    def time_passes(self, seconds: float, tick: bool) -> None:
        """Without a tick, the next event fires what fell due."""
        self.now += seconds
        if tick:
            self._expire()
            self._call(lambda: self.machine.tick(self.now))

    @rule(data=st.data(), chore=st.sampled_from(CHORES))
    def daemon_chore(self, data: st.DataObject, chore: str) -> None:
        chores: dict[str, Callable[[st.DataObject], None]] = {
            "park_is_durable": self.park_is_durable,
            "checkpoint_is_stored": self.checkpoint_is_stored,
            "replay_parked": self.replay_parked,
            "admin_skips": self.admin_skips,
            "duplicate_ack": self.duplicate_ack,
            "read_in_a_stale_epoch": self.read_in_a_stale_epoch,
            "shutdown_checkpoint": self.shutdown_checkpoint,
            "handlers_start": self.handlers_start,
            "withdraw": self.withdraw,
        }
        chores[chore](data)

    @precondition(lambda self: self.quiet >= QUIET_STEPS)
    @rule(data=st.data(), disruption=st.sampled_from(DISRUPTIONS))
    def disrupt(self, data: st.DataObject, disruption: str) -> None:
        self.quiet = 0
        disruptions: dict[str, Callable[[st.DataObject], None]] = {
            "seek": self.seek,
            "crash": self.crash,
            "consumer_count_changes": self.consumer_count_changes,
        }
        disruptions[disruption](data)

    # Chores and disruptions: each does nothing when it does not apply.

    def park_is_durable(self, data: st.DataObject) -> None:
        if self.pending_parks:
            self._park_is_durable(data.draw(st.sampled_from(sorted(self.pending_parks))))

    def checkpoint_is_stored(self, _data: st.DataObject) -> None:
        if self.write_queue:
            self._store_next_write()

    def replay_parked(self, data: st.DataObject) -> None:
        """A replay request; rows whose earlier replay is unfinished may be among them."""
        rows = sorted(self.parked_rows)
        if not rows:
            return
        chosen = data.draw(st.lists(st.sampled_from(rows), min_size=1, max_size=3, unique=True))
        self._expire()
        for position in chosen:
            if position not in self.replays:  # the machine ignores it, as the model does
                self.replays[position] = ModelReplay(self.parked_rows[position])
        envelopes = [self.parked_rows[position] for position in chosen]
        self._call(lambda: self.machine.replay(envelopes, self.now))

    def admin_skips(self, data: st.DataObject) -> None:
        unfinished = [p for p, m in self.read.items() if not m.finished]
        if not unfinished:
            return
        position = data.draw(st.sampled_from(unfinished), "skipped position")
        self._expire()
        self._finish(self.read[position], by_handler=False)
        self.owed.discard(position)
        self._call(lambda: self.machine.admin_skip(position, self.now))

    def duplicate_ack(self, data: st.DataObject) -> None:
        if self.answered:
            delivery_id = data.draw(st.sampled_from(self.answered), "answered delivery")
            self._expire()
            self._call(lambda: acked(self.machine, delivery_id, self.now))

    def read_in_a_stale_epoch(self, data: st.DataObject) -> None:
        if self.epoch > 0 and self.outbox:
            batch = data.draw(st.lists(st.sampled_from(self.outbox), max_size=3), "stale batch")
            stale = data.draw(st.integers(0, self.epoch - 1), "stale epoch")
            assert self.machine.messages_read(batch, stale, self.now) == []

    def shutdown_checkpoint(self, _data: st.DataObject) -> None:
        write = self.machine.final_checkpoint()
        if write is None:
            assert self.expected_checkpoint() == self.requested
        else:
            assert write.position == self.expected_checkpoint() != self.requested
            assert write.epoch == self.epoch
            self.requested, self.pending_write = write.position, (write.position, write.epoch)
            self.write_queue.append(self.pending_write)
            self.last_request_at = self.machine_now  # final_checkpoint reads no clock
            self.finished_since_request = 0

    def seek(self, data: st.DataObject) -> None:
        """An operator seek: the store takes the new epoch and checkpoint, then the machine.

        Writes the daemon queued before it stay queued ahead of the seek's own write; the
        store refuses them by their epoch. One the store took just before the seek may be
        confirmed after it, and must change nothing.
        """
        targets = [START, *(e.position for e in self.outbox)]
        # Often back below a write still queued: the case a write stamped late got wrong.
        back = [p for p in targets if self.write_queue and p < self.write_queue[-1][0]]
        to = data.draw(st.sampled_from(back or targets) | st.sampled_from(targets), "seek target")
        stored_before_seek = None
        # bool(): a draw after `and` would take the queue's type as its own.
        if bool(self.write_queue) and data.draw(
            st.booleans(), "a write lands just before the seek"
        ):
            stored_before_seek = self._apply_next_write()
        self._expire()
        for message in self.read.values():
            message.current = None  # its deliveries in flight are stale from now on
        self.epoch += data.draw(st.integers(1, 2), "epochs")
        self.store_epoch, self.store_checkpoint = self.epoch, to
        self.read, self.start_position, self.floor = {}, to, to
        self._start_ordering_anew()
        self.acked_order, self.finished_since_request = {}, 0
        # Everything after the target is delivered again (what a crash left unfinished
        # below it may be skipped: that is what a seek forward is for).
        self.owed = {e.position for e in self.outbox if e.position > to}
        writes = self._call(lambda: self.machine.seek(to, self.epoch, self.now), forced_write=True)
        assert writes == [to]
        if stored_before_seek is not None:
            position, epoch = stored_before_seek
            assert (
                self._call(lambda: self.machine.checkpoint_written(position, epoch, self.now)) == []
            )
            assert self.machine.written_checkpoint == self.written
        if data.draw(st.booleans(), "the writer catches up before anything is re-read"):
            while self.write_queue:
                self._store_next_write()

    def crash(self, _data: st.DataObject) -> None:
        """The daemon dies with its handlers and queued writes; a new one starts from the
        stored checkpoint.
        """
        unfinished = {p for p, m in self.read.items() if not m.finished}
        assert all(position > self.store_checkpoint for position in unfinished)
        self.owed |= unfinished
        self.epoch += 1
        self.store_epoch = self.epoch
        self.write_queue.clear()
        self.written = self.store_checkpoint
        self._restart(self.store_checkpoint)

    def consumer_count_changes(self, data: st.DataObject) -> None:
        consumers = data.draw(st.integers(1, 4), "consumers")
        self._expire()
        self.consumers = consumers
        self._start_ordering_anew()
        self._call(lambda: self.machine.consumer_count_changed(consumers, self.now))

    # Steps shared by rules and the teardown -------------------------------------------

    def _unread(self) -> list[Envelope]:
        after = self.machine.next_read_position
        return [envelope for envelope in self.outbox if envelope.position > after]

    def _read(self, batch: list[Envelope]) -> None:
        self._expire()
        for envelope in batch:
            self.read[envelope.position] = ModelMessage(envelope)
        self._call(lambda: self.machine.messages_read(batch, self.epoch, self.now))

    def handlers_start(self, data: st.DataObject) -> None:
        """The daemon reports a batch of handlers that began, in any order."""
        waiting = sorted(i for i, f in self.flights.items() if f.deadline is None)
        if self._fifo():
            if waiting and waiting[0] == min(self.hand):
                self._start(waiting[:1])
        elif waiting:
            ids = data.draw(st.lists(st.sampled_from(waiting), min_size=1, unique=True), "start")
            self._start(ids)

    def withdraw(self, data: st.DataObject) -> None:
        """A delivery dropped before its handler started (sought away while waiting)."""
        waiting = sorted(i for i, f in self.flights.items() if f.deadline is None)
        if not waiting:
            return
        delivery_id = data.draw(st.sampled_from(waiting), "withdrawn")
        if self._fifo():
            # Whatever stops a delivery before it starts stops all behind it too.
            stopped = [delivery_id, *self._queued_behind(delivery_id)]
            self._expire()
            outcomes = []
            for i in stopped:
                if i in self.flights and self.flights[i].deadline is None:
                    self.hand.discard(i)
                    self._end_withdrawn(self.flights[i])
                    outcomes.append(Outcome(i, OutcomeKind.WITHDRAWN))
            self._call(lambda: self.machine.finished(outcomes, self.now))
            return
        self._expire()
        self.hand.discard(delivery_id)
        self._end_withdrawn(self.flights[delivery_id])
        self._call(lambda: withdrawn(self.machine, delivery_id, self.now))

    def _start(self, ids: list[int]) -> None:
        self._expire()
        for delivery_id in ids:
            flight = self.flights.get(delivery_id)
            if flight is not None and flight.deadline is None:
                flight.deadline = self.now + TIMEOUT
                if flight.in_order and flight.stream is not None:
                    # One slot: starts in Position order but for re-attempts of one message.
                    position = flight.envelope.position
                    assert self.last_start is None or self.last_start <= position
                    self.last_start = position
        self._call(lambda: self.machine.started([[i] for i in ids], self.now))

    def _start_ordering_anew(self) -> None:
        """Deliveries from before a seek, crash or count change may start in any order."""
        self.last_start = None
        for flight in self.flights.values():
            flight.in_order = False

    def _end_withdrawn(self, flight: Flight) -> None:
        """Not an attempt: the message is ready again with the attempt count it had."""
        del self.flights[flight.delivery_id]
        target: ModelMessage | ModelReplay | None = flight.stream or flight.replay
        if target is not None and target.current == flight.delivery_id:
            target.current = None
            target.attempts -= 1

    def _answer_run(self, answers: list[tuple[int, str]]) -> None:
        # A run reports its outcomes at its end; only a start the daemon saw on its way (the
        # first one, here) was reported before.
        reported = answers[:1] if self._fifo() else answers
        unstarted = [
            i for i, _ in reported if i in self.flights and self.flights[i].deadline is None
        ]
        if unstarted:
            self._start(unstarted)  # a handler answers only once it has started
        self._expire()
        outcomes = []
        for delivery_id, outcome in answers:
            timed_out = delivery_id not in self.flights or self.flights[delivery_id].overran
            self.hand.discard(delivery_id)
            self.answered.append(delivery_id)
            if delivery_id in self.flights:
                self._end(self.flights[delivery_id], outcome)
            kind, detail = OUTCOME_EVENTS[outcome]
            outcomes.append(Outcome(delivery_id, kind, detail))
            if self._fifo() and (timed_out or kind is not OutcomeKind.ACKED):
                # The run is cut (a failure, or a handler that overran its timeout): what
                # waits behind it on the slot is withdrawn in the same report.
                for behind in self._queued_behind(delivery_id):
                    self.hand.discard(behind)
                    self._end_withdrawn(self.flights[behind])
                    outcomes.append(Outcome(behind, OutcomeKind.WITHDRAWN))
                break
        self._call(lambda: self.machine.finished(outcomes, self.now))

    def _answer(self, delivery_id: int, outcome: str) -> None:
        if self._fifo():
            self._answer_run([(delivery_id, outcome)])  # it may cut what waits behind it
            return
        flight = self.flights.get(delivery_id)
        if flight is not None and flight.deadline is None:
            self._start([delivery_id])  # a handler answers only once it has started
        self._expire()
        self.hand.discard(delivery_id)
        self.answered.append(delivery_id)
        if delivery_id in self.flights:
            self._end(self.flights[delivery_id], outcome)
        m, now = self.machine, self.now
        events = {
            "ack": lambda: acked(m, delivery_id, now),
            "fail": lambda: failed(m, delivery_id, "boom", now),
            "retry": lambda: requested_retry(m, delivery_id, now),
            "park": lambda: requested_park(m, delivery_id, "poison", now),
            "skip": lambda: requested_skip(m, delivery_id, now),
            "unavailable": lambda: unavailable(m, delivery_id, now),
        }
        self._call(events[outcome])

    def _park_is_durable(self, park: tuple[Position, int]) -> None:
        """The daemon committed the parked row: every Park waiting on it is finished."""
        position, epoch = park
        self.parked_rows[position] = self.pending_parks.pop(park)
        self._expire()
        message = self.read.get(position)
        if message is not None and message.parking and epoch == self.epoch:
            self._finish(message, by_handler=False)
        replay = self.replays.get(position)
        if replay is not None and replay.parking and replay.park_epoch == epoch:
            del self.replays[position]
        self._call(lambda: self.machine.parked(position, epoch, self.now))

    def _apply_next_write(self) -> tuple[Position, int] | None:
        """The store applies the oldest queued write; returns it unless refused."""
        position, epoch = self.write_queue.pop(0)
        if epoch != self.store_epoch:
            return None
        self.store_checkpoint = position
        self.stored_checkpoint_never_passes_an_unfinished_message()  # the teardown's too
        return position, epoch

    def _store_next_write(self) -> None:
        stored = self._apply_next_write()
        if stored is None:
            return
        if stored == self.pending_write:
            self.written, self.pending_write = stored[0], None
        self._expire()
        self._call(lambda: self.machine.checkpoint_written(*stored, self.now))

    # Invariants -------------------------------------------------------------------------

    @invariant()
    def checkpoint_is_just_below_the_oldest_unfinished_message(self) -> None:
        expected = self.expected_checkpoint()
        assert self.machine.checkpoint == expected
        assert self.machine.checkpoint >= self.floor, "checkpoint moved back without a seek"
        self.floor = expected
        assert self.machine.written_checkpoint == self.written

    @invariant()
    def stored_checkpoint_never_passes_an_unfinished_message(self) -> None:
        assert self.store_epoch == self.epoch
        assert self.store_checkpoint <= self.expected_checkpoint(), (
            f"stored {self.store_checkpoint} above unfinished messages; {self.write_queue=}"
        )

    @invariant()
    def counts_match_the_model(self) -> None:
        m = self.machine
        assert m.epoch == self.epoch
        last_read = next(reversed(self.read), self.start_position)
        assert m.next_read_position == last_read
        buffered = sum(1 for x in self.read.values() if not x.finished and x.current is None)
        assert m.buffered_count == buffered
        assert m.read_wanted() == max(0, self.settings.buffer_size - buffered)
        loads = collections.Counter(flight.consumer for flight in self.flights.values())
        assert m.in_flight_by_consumer == dict(loads)

    @invariant()
    def a_replay_is_in_flight_once(self) -> None:
        """An overran attempt may still run beside its retry on another consumer (not under
        pinned, whose key it holds), as a stream message's does."""
        replays = [
            f.envelope.position
            for f in self.flights.values()
            if f.replay is not None and not f.overran
        ]
        assert len(replays) == len(set(replays)), replays

    @invariant()
    def pinned_keys_are_in_flight_once_and_drain_to_their_owner(self) -> None:
        if not self.pinned:
            return
        keys = [f.envelope.partition_key for f in self.flights.values()]
        in_flight = [key for key in keys if key is not None]
        assert len(in_flight) == len(set(in_flight))
        draining = {
            f.envelope.partition_key
            for f in self.flights.values()
            if f.envelope.partition_key is not None
            and f.consumer != owner_of(f.envelope.partition_key, self.consumers)
        }
        assert self.machine.draining_keys == draining

    def teardown(self) -> None:
        """(d) and (e): keep reading and acking; everything finishes, nothing owed is lost."""
        if not hasattr(self, "machine"):
            return
        for _ in range(2000):
            unread = self._unread()
            if unread and self.machine.read_wanted():
                self._read(unread[: self.machine.read_wanted()])
            elif self.hand:
                self._answer(min(self.hand), "ack")
            elif self.pending_parks:
                self._park_is_durable(min(self.pending_parks))
            elif self.write_queue:
                self._store_next_write()
            elif unread or self.replays or any(not m.finished for m in self.read.values()):
                self.now += self.settings.retry_backoff_max
                self._expire()
                self._call(lambda: self.machine.tick(self.now))
            else:
                break
        else:
            raise AssertionError("the subscription did not drain")
        assert not self.owed, f"unfinished at a crash, never redelivered: {sorted(self.owed)}"
        assert self.machine.checkpoint == self.machine.next_read_position
        assert self.machine.buffered_count == 0
        assert self.machine.in_flight_by_consumer == {}


class PinnedModel(SubscriptionModel):
    strategies = (Strategy.PINNED,)


class SharedModel(SubscriptionModel):
    strategies = (Strategy.ROUND_ROBIN, Strategy.DISPATCH_TO_SINGLE)


class PrefetchModel(SubscriptionModel):
    """Several deliveries per slot, as the daemon hands a consumer a run or a batch; mostly
    with the defaults' one consumer and one slot, where order is strict."""

    strategies = (Strategy.ROUND_ROBIN, Strategy.DISPATCH_TO_SINGLE)
    prefetch_choices = (2, 3)
    consumer_choices = (1, 1, 1, 2)
    max_in_flight_choices = (1, 1, 2)


_settings = settings(
    max_examples=150,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestPinnedSubscription = _settings(PinnedModel).TestCase
TestSharedSubscription = _settings(SharedModel).TestCase
TestPrefetchSubscription = _settings(PrefetchModel).TestCase
