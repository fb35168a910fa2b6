"""The machine's records of a message and of one delivery of it."""

import dataclasses
import enum

from poller.subscription.envelope import Envelope

Priority = tuple[int, int, int]
"""Dispatch order among a consumer's ready keys: replays (0, seq, 0) before stream (1, tx, pos)."""


class MessageState(enum.Enum):
    QUEUED = enum.auto()
    """Waiting for a consumer: never delivered, or its retry backoff has passed."""
    IN_FLIGHT = enum.auto()
    BACKOFF = enum.auto()
    """Failed; waiting out the retry delay."""
    PARKING = enum.auto()
    """Park emitted; unfinished until the daemon confirms the parked row is durable."""
    DONE = enum.auto()
    DROPPED = enum.auto()
    """Read in an epoch that a seek ended; nothing of it may be delivered or counted any more."""


@dataclasses.dataclass(slots=True, eq=False)
class TrackedMessage:
    """One message in the machine; identity (not equality) matters, hence eq=False."""

    envelope: Envelope
    replayed: bool
    priority: Priority
    state: MessageState = MessageState.QUEUED
    attempts: int = 0
    deferrals: int = 0
    """Deliveries its destination could not take (UNAVAILABLE): they time its backoff, as
    failed attempts do, without counting toward parking."""


@dataclasses.dataclass(slots=True, eq=False)
class Delivery:
    """One attempt in a consumer's hands.

    It outlives its message's interest in it (seek, admin skip): it still occupies the
    consumer and, under pinned, its key until it is acked, failed, timed out or its consumer
    dies, because the handler may still be running (Pulsar #25627).
    """

    delivery_id: int
    consumer: int
    message: TrackedMessage
    deadline: float | None = None
    """When it times out; None until its handler starts, so waiting for a thread is free."""
    call_size: int = 1
    """Deliveries in its handler call (a batch's size): the call has that many timeouts."""
    held: int = 0
    """Overran: consumer units it holds beyond its own, so that its call fills one slot."""
    attempt: int = 0
    """Overran: the attempt its deadline failed, which an outcome that beat it may undo."""

    @property
    def is_current(self) -> bool:
        """Whether this delivery's outcome still decides its message's fate."""
        return self.message.state is MessageState.IN_FLIGHT
