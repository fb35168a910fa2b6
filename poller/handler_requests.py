"""Exceptions a handler raises to say what should happen to its message instead of failing.

Any other exception is a failure: the message is retried with backoff and parked after
max_retry_count attempts.
"""


class RetryMessage(Exception):  # noqa: N818 - a request, not an error
    """Deliver this message again later (counts as an attempt)."""


class ParkMessage(Exception):  # noqa: N818 - a request, not an error
    """Give up on this message now: record it in outbox.parked_messages."""

    def __init__(self, reason: str = "parked by the handler") -> None:
        super().__init__(reason)
        self.reason = reason


class DestinationUnavailable(Exception):  # noqa: N818 - names the destination's state
    """The handler's destination (a broker, an API) cannot take messages now.

    The message is delivered again after the retry backoff, and the attempt does not count
    toward max_retry_count: an outage of the destination never parks a message (parking is
    for messages the destination refuses). Raise anything else for a fault of the message.
    """

    def __init__(self, reason: str = "the destination is unavailable") -> None:
        super().__init__(reason)
        self.reason = reason


class SkipMessage(Exception):  # noqa: N818 - a request, not an error
    """Treat this message as done without handling it."""
