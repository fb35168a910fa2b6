"""The checkpoint decisions, with the time passed in (no sleeps): the spec's acceptance
criteria, then properties over random sequences of reads and idle moments."""

from dataclasses import dataclass, field

from hypothesis import given
from hypothesis import strategies as st

from outbox.positions import Position
from poller.catch_up.checkpoint_signals import CheckpointSignals
from poller.catch_up.signals import Checkpoint


def deliver(
    signals: CheckpointSignals, count: int, *, first: int = 1, now: float = 0.0
) -> list[Checkpoint | None]:
    return [
        signals.scanned(Position(n, n), delivered=True, now=now)
        for n in range(first, first + count)
    ]


def test_interval_3_and_6_live_messages_give_checkpoints_at_the_3rd_and_6th() -> None:
    signals = CheckpointSignals(interval=3, timeout=3600)
    signals.caught_up()
    assert deliver(signals, 6) == [None, None, Checkpoint(3, 3), None, None, Checkpoint(6, 6)]


def test_one_live_message_then_silence_gives_one_checkpoint_after_the_timeout() -> None:
    signals = CheckpointSignals(interval=1000, timeout=1.0)
    signals.caught_up()
    assert signals.scanned(Position(7, 70), delivered=True, now=10.0) is None
    assert signals.deadline() == 11.0
    assert signals.idle(10.999) is None
    assert signals.idle(11.0) == Checkpoint(7, 70)
    # Never the same checkpoint twice: the silence goes on, nothing more.
    assert signals.deadline() is None
    assert signals.idle(100.0) is None


def test_no_checkpoint_when_the_live_phase_received_nothing() -> None:
    signals = CheckpointSignals(interval=1, timeout=1.0)
    signals.scanned(Position(1, 1), delivered=True, now=0.0)
    signals.caught_up()
    assert signals.deadline() is None
    assert signals.idle(1_000_000.0) is None


def test_no_checkpoint_during_catch_up() -> None:
    signals = CheckpointSignals(interval=2, timeout=1.0)
    assert deliver(signals, 10) == [None] * 10
    assert signals.idle(1_000.0) is None
    signals.caught_up()
    # Catch-up deliveries do not count towards the first live checkpoint.
    assert deliver(signals, 2, first=11) == [None, Checkpoint(12, 12)]


def test_a_filtered_subscription_checkpoint_carries_the_scanned_position() -> None:
    signals = CheckpointSignals(interval=2, timeout=1.0)
    signals.caught_up()
    signals.scanned(Position(1, 1), delivered=True, now=0.0)
    signals.scanned(Position(1, 2), delivered=False, now=0.0)
    signals.scanned(Position(2, 3), delivered=False, now=0.5)
    assert signals.idle(1.0) == Checkpoint(2, 3)


def test_skipped_rows_alone_neither_count_nor_start_the_timer() -> None:
    signals = CheckpointSignals(interval=1, timeout=1.0)
    signals.caught_up()
    for n in range(1, 50):
        assert signals.scanned(Position(n, n), delivered=False, now=float(n)) is None
    assert signals.idle(1_000.0) is None


# Properties ---------------------------------------------------------------------------------


@dataclass
class Reference:
    """What the rules say, tracked step by step beside the real thing."""

    interval: int
    timeout: float
    live: bool = False
    scanned: Position | None = None
    delivered_since: int = 0
    live_deliveries: int = 0
    last_delivery_at: float = 0.0
    emitted: list[Checkpoint] = field(default_factory=list)


steps = st.lists(
    st.one_of(
        st.tuples(st.just("scan"), st.booleans(), st.integers(0, 3)),
        st.tuples(st.just("idle"), st.booleans(), st.integers(0, 3)),
        st.tuples(st.just("caught_up"), st.booleans(), st.integers(0, 3)),
    ),
    max_size=80,
)


@given(interval=st.integers(1, 5), timeout=st.integers(1, 4), script=steps)
def test_checkpoints_follow_the_rules_for_any_sequence(
    interval: int, timeout: int, script: list[tuple[str, bool, int]]
) -> None:
    signals = CheckpointSignals(interval=interval, timeout=float(timeout))
    model = Reference(interval, float(timeout))
    now = 0.0
    row = 0
    for action, delivered, elapsed in script:
        now += elapsed
        if action == "caught_up":
            signals.caught_up()
            model.live = True
            continue
        if action == "scan":
            row += 1
            at = Position(row // 3, row)  # several rows per transaction, in delivery order
            checkpoint = signals.scanned(at, delivered=delivered, now=now)
            model.scanned = at
            if model.live and delivered:
                model.delivered_since += 1
                model.live_deliveries += 1
                model.last_delivery_at = now
            due = model.live and delivered and model.delivered_since >= interval
        else:
            checkpoint = signals.idle(now)
            due = model.delivered_since > 0 and now >= model.last_delivery_at + timeout
        if checkpoint is None:
            assert not due
            continue
        assert due
        # None before the first live message: a live delivery happened since the last one.
        assert model.live_deliveries > 0
        # It carries the last row scanned, delivered or skipped.
        assert model.scanned is not None
        assert checkpoint.at == model.scanned
        # Never twice the same, never backwards: each is safe to resume from.
        if model.emitted:
            assert checkpoint.at > model.emitted[-1].at
        model.emitted.append(checkpoint)
        model.delivered_since = 0
