"""What every relay target is: one small class per broker behind this one interface.

A target publishes a batch of messages, in order, and says which the broker did not take:
refused for good, or not now.
Adding a broker (Kafka is the next one users will ask for) is one more module with a class
that satisfies `Target` and a `TargetKind` entry in `outbox_relays/kinds.py`; nothing else changes.
"""

from collections.abc import Mapping, Sequence
from typing import Protocol

from outbox.positions import Position
from poller.message import Message


class BrokerUnavailable(Exception):  # noqa: N818 - names the broker's state, not an error class
    """The broker cannot take messages now: down, refusing connections, timing out, or missing
    the stream, exchange or subject the URL names. Nothing of the batch counts as published;
    the relay retries it with backoff, and never parks a message for it."""

    def __init__(self, kind: str, reason: str) -> None:
        super().__init__(reason)
        self.kind = kind
        """A short label for the metrics: connection, timeout, missing, refused, server_error."""
        self.reason = reason
        """One line that names what is wrong (a missing stream by name), credentials masked."""


Unsent = str | BrokerUnavailable
"""Why one message of a batch is not published: a reason (refused for good: the relay parks
it) or BrokerUnavailable (not now: it is delivered again later, no attempt counted)."""


def whole_or_each(
    messages: Sequence[Message], unsent: dict[Position, Unsent]
) -> dict[Position, Unsent]:
    """`unsent`, or, when the broker could take none of `messages` now, its first answer
    raised: the batch as a whole is unavailable."""
    answers = [unsent.get(message.at) for message in messages]
    if answers and all(isinstance(answer, BrokerUnavailable) for answer in answers):
        first = answers[0]
        assert isinstance(first, BrokerUnavailable)
        raise first
    return unsent


class Target(Protocol):
    """One broker connection. The relay calls `publish` for one batch at a time per target."""

    @property
    def name(self) -> str:
        """The target's URL with its user-info masked, for logs, status and metrics."""

    async def publish(self, messages: Sequence[Message]) -> Mapping[Position, Unsent]:
        """Publish `messages` in this order and return once the broker has answered them.

        Returns the messages not published, by position: a reason string for one the broker
        refused for good (the relay parks it), a BrokerUnavailable for one it could not take
        now (a nack, a full queue, a stream-state error: the relay delivers it again later,
        with the messages after it of its key). Every message not named is confirmed, and
        finished: a retry never sends it again. Raises BrokerUnavailable when it cannot take
        the batch at all. A target de-duplicates where its broker can (NATS Msg-Id, a Redis
        check in the same atomic step). Connects on first use and reconnects after a failure.
        """

    async def check(self) -> None:
        """Connect now and check the destination's settings, logging a warning for each that
        cannot keep the target's promise (the relay does this at start). Raises
        BrokerUnavailable when the broker cannot be reached."""

    async def close(self) -> None:
        """Close the connection; publish may still be called after (or after a publish was
        cancelled midway), and reconnects."""
