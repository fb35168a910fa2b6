"""What became of one delivery, as the daemon reports it back in a batch."""

import enum
from typing import NamedTuple


class OutcomeKind(enum.Enum):
    ACKED = enum.auto()
    """The handler succeeded, or chose to skip the message: it is finished."""
    FAILED = enum.auto()
    """The handler raised (or asked for a retry, which also counts as an attempt)."""
    PARK_REQUESTED = enum.auto()
    """The handler asked to park the message now."""
    UNAVAILABLE = enum.auto()
    """The handler's destination could not take it: retried after the backoff, not an
    attempt (an outage never parks a message)."""
    WITHDRAWN = enum.auto()
    """The daemon dropped the delivery before its handler started: not an attempt."""


class Outcome(NamedTuple):
    """A tuple, not a frozen dataclass: one is made per ack, and a frozen dataclass' __init__
    cost four times as much."""

    delivery_id: int
    kind: OutcomeKind
    detail: str = ""
    """The error of a FAILED delivery, the reason of a PARK_REQUESTED or UNAVAILABLE one."""
    ended_at: float | None = None
    """When the handler call returned (the machine's clock); None: when it is reported. The
    machine judges message_timeout by it, so an ack that ended before its deadline counts
    however late the report reaches it."""
