"""What the machine needs to know of one outbox message."""

import dataclasses

from outbox.positions import Position


# Not frozen: one is built per message read, and a frozen dataclass' __init__ cost five times
# as much (it sets each field through object.__setattr__). Nothing changes one once made.
@dataclasses.dataclass(slots=True)
class Envelope:
    """A message's place and partition key; `payload` is the daemon's, never looked at here."""

    position: Position
    partition_key: str | None
    payload: object = dataclasses.field(default=None, compare=False, repr=False)
