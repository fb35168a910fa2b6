"""What a catch-up subscription yields besides messages."""

from typing import NamedTuple

from outbox.positions import Position


class Checkpoint(NamedTuple):
    """A place in delivery order that is safe and worthwhile to store.

    Everything up to and including (transaction_id, position) has been yielded (or skipped by
    the subscription's filter), and nothing after it has: subscribing again with
    `start=checkpoint` yields exactly the messages after it, whatever order transactions
    committed in around it.
    """

    transaction_id: int
    position: int

    @property
    def at(self) -> Position:
        return Position(self.transaction_id, self.position)

    def __str__(self) -> str:
        return f"{self.transaction_id}:{self.position}"


class CaughtUp:
    """Yielded once, when every message committed before the subscription connected has been
    yielded (waiting, as those messages do, for an older transaction still open); what
    follows is live."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "CaughtUp()"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CaughtUp)

    def __hash__(self) -> int:
        return hash(CaughtUp)
