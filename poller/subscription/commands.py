"""What the machine asks the daemon to do. The daemon carries commands out in list order."""

import dataclasses

from poller.positions import Position
from poller.subscription.envelope import Envelope


@dataclasses.dataclass(frozen=True, slots=True)
class Deliver:
    """Hand `envelope` to `consumer`; report the outcome with `delivery_id`.

    `replayed` marks a message re-delivered from the parked table, outside the stream order.
    """

    consumer: int
    envelope: Envelope
    attempt: int
    epoch: int
    delivery_id: int
    replayed: bool = False


@dataclasses.dataclass(frozen=True, slots=True)
class Park:
    """Write a parked row for `envelope` durably, then call `parked(position)`.

    The message stays unfinished (the checkpoint stays below it) until that call, so a crash
    before the row is committed re-reads the message instead of losing it.
    """

    envelope: Envelope
    attempts: int
    reason: str
    replayed: bool = False


@dataclasses.dataclass(frozen=True, slots=True)
class ReplayDone:
    """A replayed message was handled (acked or skipped): delete its parked row."""

    position: Position


@dataclasses.dataclass(frozen=True, slots=True)
class WriteCheckpoint:
    """Store `position` as the subscription's checkpoint, then call `checkpoint_written`.

    Writes must be applied in the order they are emitted: a seek emits one that moves back.
    """

    position: Position


Command = Deliver | Park | ReplayDone | WriteCheckpoint
