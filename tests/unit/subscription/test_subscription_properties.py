"""Stateful property tests: random event sequences against a plain reference model.

The model follows the commands the machine returns and checks, after every step: (a) the
checkpoint equals the greatest read position with everything at or below it finished, so it
never passes an unfinished message and only goes back at a seek; (b) under pinned, one
delivery per key at a time (old-epoch ones included) on the key's owner, in Position order;
(c) nothing of an old epoch is delivered or counted after a seek; (d) after a crash every
message unfinished at the crash is delivered again; (e) keep acking and everything finishes.
Also exact: which consumer each strategy picks, no retry before its backoff, no consumer
idle while a message it may take is ready, Park/ReplayDone/WriteCheckpoint when, and only
when, due. A crash rebuilds the machine from the last checkpoint the daemon confirmed.
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

KEYS = ("a", "b", "c", "d", None)
TIMEOUT = 5.0
OUTCOMES = ("ack", "fail", "retry", "park", "skip")
CHORES = (
    "park_is_durable",
    "checkpoint_is_stored",
    "replay_parked",
    "admin_skips",
    "duplicate_ack",
    "read_in_a_stale_epoch",
    "shutdown_checkpoint",
)
DISRUPTIONS = ("seek", "crash", "consumer_count_changes", "consumer_dies")
QUIET_STEPS = 5
"""Machine events between two disruptions, so that work gets done in between."""


@dataclasses.dataclass(eq=False)
class ModelMessage:
    """A stream message read in the current epoch, as the model sees it."""

    envelope: Envelope
    finished: bool = False
    parking: bool = False
    attempts: int = 0
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
    attempts: int = 0
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
    deadline: float
    stream: ModelMessage | None
    replay: ModelReplay | None


class SubscriptionModel(RuleBasedStateMachine):
    strategies: ClassVar[tuple[Strategy, ...]] = tuple(Strategy)

    @initialize(data=st.data())
    def start(self, data: st.DataObject) -> None:
        min_count = data.draw(st.integers(1, 3), "min_checkpoint_count")
        self.settings = SubscriptionSettings(
            strategy=data.draw(st.sampled_from(self.strategies), "strategy"),
            consumers=data.draw(st.integers(1, 3), "consumers"),
            max_in_flight=data.draw(st.integers(1, 2), "max_in_flight"),
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
        self.now = 0.0
        self.outbox: list[Envelope] = []
        self.epoch = 0
        self.written = START
        # Rows parked by an earlier run, so replays need no long run-up.
        parked_keys = data.draw(st.lists(st.sampled_from(KEYS), max_size=3), "parked keys")
        self.parked_rows = {
            Position(0, i): Envelope(Position(0, i), key) for i, key in enumerate(parked_keys, 1)
        }
        self.owed: set[Position] = set()
        self.answered: list[int] = []
        self.next_delivery_id = 1
        self.quiet = 0
        self._restart(START)

    def _restart(self, start: Position) -> None:
        """A fresh machine, as the daemon builds after a crash, from the stored checkpoint."""
        self.machine = SubscriptionMachine(
            self.settings,
            now=self.now,
            start=start,
            epoch=self.epoch,
            first_delivery_id=self.next_delivery_id,
        )
        self.consumers = self.settings.consumers
        self.start_position = start
        self.read: dict[Position, ModelMessage] = {}
        self.flights: dict[int, Flight] = {}
        self.hand: set[int] = set()
        """Deliveries whose handler has not answered; timed-out ones included."""
        self.replays: dict[Position, ModelReplay] = {}
        self.pending_parks: dict[Position, Envelope] = {}
        self.pending_write: Position | None = None
        self.requested = start
        self.last_request_at = self.now
        self.finished_since_request = 0
        self.acked_order: dict[str, Position] = {}
        self.last_picked = -1
        self.floor = start
        self.expected_parks: list[tuple[Position, bool, int]] = []
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
        """The timeouts the machine fires first thing in any event at `now`."""
        for flight in [f for f in self.flights.values() if f.deadline <= self.now]:
            self._end(flight, "fail")

    def _end(self, flight: Flight, outcome: str) -> None:
        del self.flights[flight.delivery_id]
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
        elif outcome == "park" or target.attempts >= limit:
            target.parking = True
            replayed = isinstance(target, ModelReplay)
            self.expected_parks.append((position, replayed, target.attempts))
        else:
            target.due = self.now + self.settings.retry_delay(target.attempts)

    def _finish(self, message: ModelMessage, *, by_handler: bool) -> None:
        message.finished = True
        message.parking = False
        message.current = None
        self.finished_since_request += 1
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
            )
        )

    def _call(
        self, event: Callable[[], list[Command]], *, forced_write: bool = False
    ) -> list[Position]:
        """Run one machine event, check every command it returned; returns its writes."""
        self.quiet += 1
        write_due = self._write_due()
        commands = event()
        parks: list[tuple[Position, bool, int]] = []
        done: list[Position] = []
        writes: list[Position] = []
        for command in commands:
            if isinstance(command, Deliver):
                self._on_deliver(command)
            elif isinstance(command, Park):
                envelope = command.envelope
                parks.append((envelope.position, command.replayed, command.attempts))
                self.pending_parks[envelope.position] = envelope
            elif isinstance(command, ReplayDone):
                done.append(command.position)
                del self.parked_rows[command.position]
            else:
                assert isinstance(command, WriteCheckpoint)
                writes.append(command.position)
        assert sorted(parks) == sorted(self.expected_parks)
        assert sorted(done) == sorted(self.expected_replay_done)
        self.expected_parks, self.expected_replay_done = [], []
        assert len(writes) <= 1, writes
        if not forced_write:
            assert bool(writes) == write_due, (writes, self.finished_since_request)
        for position in writes:
            assert position == self.expected_checkpoint()
            self.requested = self.pending_write = position
            self.last_request_at = self.now
            self.finished_since_request = 0
        self._assert_no_consumer_idles_while_work_is_ready()
        return writes

    def _has_room(self, consumer: int) -> bool:
        load = sum(1 for flight in self.flights.values() if flight.consumer == consumer)
        return consumer < self.consumers and load < self.settings.max_in_flight

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
            stream.attempts += 1
            stream.current = command.delivery_id
            self.owed.discard(position)
        self.flights[command.delivery_id] = Flight(
            command.delivery_id, consumer, envelope, self.now + TIMEOUT, stream, replay
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
        for _ in range(count):
            if self.hand:
                delivery_id = data.draw(st.sampled_from(sorted(self.hand)), "delivery")
                self._answer(delivery_id, data.draw(st.sampled_from(OUTCOMES), "outcome"))

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
            "consumer_dies": self.consumer_dies,
        }
        disruptions[disruption](data)

    # Chores and disruptions: each does nothing when it does not apply.

    def park_is_durable(self, data: st.DataObject) -> None:
        if self.pending_parks:
            self._park_is_durable(data.draw(st.sampled_from(sorted(self.pending_parks))))

    def checkpoint_is_stored(self, _data: st.DataObject) -> None:
        if self.pending_write is not None:
            self._confirm_write()

    def replay_parked(self, data: st.DataObject) -> None:
        idle = sorted(set(self.parked_rows) - set(self.replays))
        if not idle:
            return
        chosen = data.draw(st.lists(st.sampled_from(idle), min_size=1, max_size=2, unique=True))
        self._expire()
        for position in chosen:
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
            self._call(lambda: self.machine.acked(delivery_id, self.now))

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
            self.requested = self.pending_write = write.position
            self.last_request_at = self.now
            self.finished_since_request = 0

    def seek(self, data: st.DataObject) -> None:
        targets = [START, *(e.position for e in self.outbox)]
        to = data.draw(st.sampled_from(targets), "seek target")
        self._expire()
        for message in self.read.values():
            message.current = None  # its deliveries in flight are stale from now on
        self.epoch += data.draw(st.integers(1, 2), "epochs")
        self.read, self.start_position, self.floor = {}, to, to
        self.acked_order, self.finished_since_request = {}, 0
        self.owed.clear()  # a seek may legitimately skip what a crash left unfinished
        expected_writes = [to] if to != self.requested else []
        writes = self._call(lambda: self.machine.seek(to, self.epoch, self.now), forced_write=True)
        assert writes == expected_writes
        # An admin seek returns once its checkpoint is stored.
        if self.pending_write is not None:
            self._confirm_write()
        assert self.machine.written_checkpoint == to

    def crash(self, _data: st.DataObject) -> None:
        """The daemon dies with its handlers; a new one starts from the stored checkpoint."""
        unfinished = {p for p, m in self.read.items() if not m.finished}
        assert all(position > self.written for position in unfinished)
        self.owed |= unfinished
        self.epoch += 1
        self._restart(self.written)

    def consumer_count_changes(self, data: st.DataObject) -> None:
        consumers = data.draw(st.integers(1, 4), "consumers")
        self._expire()
        self.consumers = consumers
        self._call(lambda: self.machine.consumer_count_changed(consumers, self.now))

    def consumer_dies(self, data: st.DataObject) -> None:
        consumer = data.draw(st.integers(0, 3), "dead consumer")
        self._expire()
        for flight in [f for f in self.flights.values() if f.consumer == consumer]:
            self.hand.discard(flight.delivery_id)
            self._end(flight, "fail")
        self._call(lambda: self.machine.consumer_died(consumer, self.now))

    # Steps shared by rules and the teardown -------------------------------------------

    def _unread(self) -> list[Envelope]:
        after = self.machine.next_read_position
        return [envelope for envelope in self.outbox if envelope.position > after]

    def _read(self, batch: list[Envelope]) -> None:
        self._expire()
        for envelope in batch:
            self.read[envelope.position] = ModelMessage(envelope)
        self._call(lambda: self.machine.messages_read(batch, self.epoch, self.now))

    def _answer(self, delivery_id: int, outcome: str) -> None:
        self._expire()
        self.hand.discard(delivery_id)
        self.answered.append(delivery_id)
        if delivery_id in self.flights:
            self._end(self.flights[delivery_id], outcome)
        m, now = self.machine, self.now
        events = {
            "ack": lambda: m.acked(delivery_id, now),
            "fail": lambda: m.failed(delivery_id, "boom", now),
            "retry": lambda: m.requested_retry(delivery_id, now),
            "park": lambda: m.requested_park(delivery_id, "poison", now),
            "skip": lambda: m.requested_skip(delivery_id, now),
        }
        self._call(events[outcome])

    def _park_is_durable(self, position: Position) -> None:
        """The daemon committed the parked row: every Park waiting on it is finished."""
        self.parked_rows[position] = self.pending_parks.pop(position)
        self._expire()
        message = self.read.get(position)
        if message is not None and message.parking:
            self._finish(message, by_handler=False)
        replay = self.replays.get(position)
        if replay is not None and replay.parking:
            del self.replays[position]
        self._call(lambda: self.machine.parked(position, self.now))

    def _confirm_write(self) -> None:
        position = self.pending_write
        assert position is not None
        self.written, self.pending_write = position, None
        self._expire()
        self._call(lambda: self.machine.checkpoint_written(position, self.now))

    # Invariants -------------------------------------------------------------------------

    @invariant()
    def checkpoint_is_just_below_the_oldest_unfinished_message(self) -> None:
        expected = self.expected_checkpoint()
        assert self.machine.checkpoint == expected
        assert self.machine.checkpoint >= self.floor, "checkpoint moved back without a seek"
        self.floor = expected
        assert self.machine.written_checkpoint == self.written <= expected

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
            elif self.pending_write is not None:
                self._confirm_write()
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


_settings = settings(
    max_examples=150,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestPinnedSubscription = _settings(PinnedModel).TestCase
TestSharedSubscription = _settings(SharedModel).TestCase
