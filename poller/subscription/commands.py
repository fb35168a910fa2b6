"""What the machine asks the daemon to do. The daemon carries commands out in list order."""

import dataclasses

from outbox.positions import Position
from poller.subscription.envelope import Envelope


# Not frozen, as Envelope: one is built per delivery. Nothing changes one once made.
@dataclasses.dataclass(slots=True)
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
    """Write a parked row for `envelope` durably, then call `parked(position, epoch)`.

    The message stays unfinished (the checkpoint stays below it) until that call, so a crash
    before the row is committed re-reads the message instead of losing it. A stream Park
    (not `replayed`) of an epoch a seek has ended may be dropped: the seek decides that
    message's fate, and its confirmation would be ignored. A replayed Park updates a row
    that exists whatever the epoch, so it is written and confirmed with its own epoch.
    """

    envelope: Envelope
    attempts: int
    reason: str
    epoch: int
    replayed: bool = False


@dataclasses.dataclass(frozen=True, slots=True)
class ReplayDone:
    """A replayed message was handled (acked or skipped): delete its parked row.

    Replays outlive seeks, so the row is deleted whatever the current epoch; `epoch` only
    records the one it was issued under.
    """

    position: Position
    epoch: int


@dataclasses.dataclass(frozen=True, slots=True)
class WriteCheckpoint:
    """Store `position` as the checkpoint if `epoch` is still the stored epoch, then call
    `checkpoint_written(position, epoch)`; refuse it (and confirm nothing) otherwise.

    The daemon must use this epoch, never the current one: a write queued in epoch e behind
    other writes, stamped with e+1 when it ran after a seek, raised the stored checkpoint
    back above the seek target, and the messages in between were never redelivered. Writes
    are applied in the order they are emitted: a seek emits one that moves back.
    """

    position: Position
    epoch: int


Command = Deliver | Park | ReplayDone | WriteCheckpoint
