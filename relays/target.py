"""What every relay target is: one small class per broker behind this one interface.

A target publishes a batch of messages, in order, and says which the broker refused for good.
Adding a broker (Kafka is the next one users will ask for) is one more module with a class
that satisfies `Target` and a `TargetKind` entry in `relays/kinds.py`; nothing else changes.
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


class Target(Protocol):
    """One broker connection. The relay calls `publish` for one batch at a time per target."""

    @property
    def name(self) -> str:
        """The target's URL with its credentials masked, for logs, status and metrics."""

    async def publish(self, messages: Sequence[Message]) -> Mapping[Position, str]:
        """Publish `messages` in this order and return once the broker has confirmed them.

        Returns the messages the broker refused for good (a reason for each, by position):
        the relay parks those. Raises BrokerUnavailable when it cannot take the batch now;
        the relay then publishes the whole batch again later, so a target de-duplicates where
        its broker can (NATS Msg-Id, a Redis check in the same atomic step). Connects on first
        use and reconnects after a failure.
        """

    async def close(self) -> None:
        """Close the connection; publish may still be called after, and reconnects."""
