"""A place in delivery order."""

from typing import NamedTuple


class Position(NamedTuple):
    """(transaction_id, position), compared as a tuple exactly as PostgreSQL compares the row.

    transaction_id is the xid8 as a Python int: psycopg hands xid8 over as text, and text
    compares wrongly ('999' > '1000'), so it is converted once, at the edge.
    """

    transaction_id: int
    position: int

    def __str__(self) -> str:
        return f"{self.transaction_id}:{self.position}"

    @classmethod
    def parse(cls, text: str) -> "Position":
        """Read `TX:POS` as printed by __str__ and accepted by the CLI."""
        parts = text.split(":")
        if len(parts) != 2 or not all(part.isdigit() for part in parts):
            raise ValueError(f"position {text!r} is not TX:POS (two non-negative integers)")
        return cls(int(parts[0]), int(parts[1]))


START = Position(0, 0)
