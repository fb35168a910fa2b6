"""A place in delivery order."""

from typing import NamedTuple

# Both halves are read and written as bigint (xid8 goes through ::text::bigint), so neither may
# exceed the largest bigint; PostgreSQL would otherwise clamp or refuse the value after the fact.
MAX_PART = 2**63 - 1


class Position(NamedTuple):
    """(transaction_id, position), compared as a tuple exactly as PostgreSQL compares the row.

    transaction_id is the xid8 as a Python int: psycopg hands xid8 over as text, and text
    compares wrongly ('999' > '1000'), so it is converted once, at the edge.
    """

    transaction_id: int
    position: int

    def __str__(self) -> str:
        return f"{self.transaction_id}:{self.position}"

    def query_parameters(self, prefix: str = "") -> dict[str, str | int]:
        """This position as the named parameters `{prefix}transaction_id`, `{prefix}position`.

        The transaction id goes as text: PostgreSQL has no cast from an integer to xid8, so
        every query casts `%(transaction_id)s::text::xid8`.
        """
        return {
            f"{prefix}transaction_id": str(self.transaction_id),
            f"{prefix}position": self.position,
        }

    @classmethod
    def parse(cls, text: str) -> "Position":
        """Read `TX:POS` as printed by __str__ and accepted by the CLI."""
        parts = text.split(":")
        # isascii: str.isdigit also accepts superscripts and other scripts' digits.
        if len(parts) != 2 or not all(part.isascii() and part.isdigit() for part in parts):
            raise ValueError(f"position {text!r} is not TX:POS (two non-negative integers)")
        transaction_id, position = (int(part) for part in parts)
        if transaction_id > MAX_PART or position > MAX_PART:
            raise ValueError(f"position {text!r} is out of range: each part is at most {MAX_PART}")
        return cls(transaction_id, position)


START = Position(0, 0)


def readable(at: Position) -> str:
    """`at` for people: TX:POS, or `end of transaction TX` for the place after every row of
    TX (`--from end`, a checkpoint at the safe frontier), whose POS is the largest bigint:
    `755:9223372036854775807` in a log line reads as a corrupt number. Machines keep TX:POS
    (`str(at)`), which `seek --to` and `--from` take either way."""
    if at.position == MAX_PART:
        return f"end of transaction {at.transaction_id}"
    return str(at)


def at_frontier(frontier: int) -> Position:
    """The place `--from end` means: past every row of every transaction below the safe
    frontier `frontier`, before every row of a transaction still running (which may commit
    later, so it must not be skipped)."""
    return Position(max(frontier - 1, 0), MAX_PART)
