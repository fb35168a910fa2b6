"""Small builders shared by the subscription example tests."""

from poller.subscription import (
    Command,
    Deliver,
    Envelope,
    Outcome,
    OutcomeKind,
    Position,
    Strategy,
    SubscriptionMachine,
    SubscriptionSettings,
    owner_of,
)


def make_settings(
    strategy: Strategy = Strategy.PINNED,
    consumers: int = 2,
    max_in_flight: int = 1,
    **overrides: object,
) -> SubscriptionSettings:
    """Settings that write every moved checkpoint at once unless a test says otherwise."""
    values: dict[str, object] = {"min_checkpoint_count": 1, "max_checkpoint_count": 1}
    values.update(overrides)
    return SubscriptionSettings.from_mapping(
        {
            "strategy": strategy.value,
            "consumers": consumers,
            "max_in_flight": max_in_flight,
            **values,
        }
    )


def make_machine(settings: SubscriptionSettings, now: float = 0.0) -> SubscriptionMachine:
    return SubscriptionMachine(settings, now=now)


def at(position: int, transaction_id: int = 1) -> Position:
    return Position(transaction_id, position)


def message(position: int, key: str | None = None) -> Envelope:
    return Envelope(at(position), key, payload=f"payload {position}")


def deliveries(commands: list[Command]) -> list[Deliver]:
    return [command for command in commands if isinstance(command, Deliver)]


def delivered(commands: list[Command]) -> list[tuple[int, Position]]:
    """(consumer, position) of every Deliver, in order."""
    return [(d.consumer, d.envelope.position) for d in deliveries(commands)]


def only_delivery(commands: list[Command]) -> Deliver:
    (delivery,) = deliveries(commands)
    return delivery


def key_owned_by(consumer: int, consumers: int, *, not_in: tuple[str, ...] = ()) -> str:
    """A partition key whose owner among `consumers` consumers is `consumer`."""
    for number in range(10_000):
        key = f"key-{number}"
        if key not in not_in and owner_of(key, consumers) == consumer:
            return key
    raise AssertionError(f"no key owned by {consumer} of {consumers}")


# One outcome at a time: the daemon reports whole runs through `finished`; these spell the
# single events the example and property tests step through.


def acked(machine: SubscriptionMachine, delivery_id: int, now: float) -> list[Command]:
    return machine.finished([Outcome(delivery_id, OutcomeKind.ACKED)], now)


def failed(machine: SubscriptionMachine, delivery_id: int, error: str, now: float) -> list[Command]:
    return machine.finished([Outcome(delivery_id, OutcomeKind.FAILED, error)], now)


def requested_retry(machine: SubscriptionMachine, delivery_id: int, now: float) -> list[Command]:
    """As the daemon reports a handler's Retry: a failure, so it counts as an attempt."""
    return failed(machine, delivery_id, "retry requested by the handler", now)


def unavailable(machine: SubscriptionMachine, delivery_id: int, now: float) -> list[Command]:
    """As the daemon reports a handler's DestinationUnavailable: backoff, not an attempt."""
    return machine.finished([Outcome(delivery_id, OutcomeKind.UNAVAILABLE, "broker down")], now)


def requested_park(
    machine: SubscriptionMachine, delivery_id: int, reason: str, now: float
) -> list[Command]:
    return machine.finished([Outcome(delivery_id, OutcomeKind.PARK_REQUESTED, reason)], now)


def requested_skip(machine: SubscriptionMachine, delivery_id: int, now: float) -> list[Command]:
    """As the daemon reports a handler's Skip: finished, like an ack."""
    return acked(machine, delivery_id, now)


def withdrawn(machine: SubscriptionMachine, delivery_id: int, now: float) -> list[Command]:
    """Dropped before its handler started: not an attempt."""
    return machine.finished([Outcome(delivery_id, OutcomeKind.WITHDRAWN)], now)
