"""What the machine needs to know of one outbox message."""

import dataclasses

from outbox.positions import Position


@dataclasses.dataclass(frozen=True, slots=True)
class Envelope:
    """A message's place and partition key; `payload` is the daemon's, never looked at here."""

    position: Position
    partition_key: str | None
    payload: object = dataclasses.field(default=None, compare=False, repr=False)
