"""A batch read against retention, which it does not hold back.

A streaming query's subscription row keeps retention behind what it may still read. A batch
read keeps none, so retention may drop rows of its range before or while it reads them. It
would then return fewer rows and say nothing; instead it compares its range with the
publication's retired-up-to mark, which a retirement raises in the transaction that drops the
rows: when planning, and in each slice's connection once its COPY has ended. A retirement
that committed before the COPY's snapshot shows in the second check; one that commits later
waits for the COPY's lock on the table, so the COPY saw every row.
"""

from typing import Any

from psycopg import sql

from outbox.positions import Position
from outbox_spark.queries import spark_queries


class RetiredRangeError(RuntimeError):
    """Retention dropped messages of the range a batch read asked for."""

    def __init__(self, publication: str, after: Position, mark: Position) -> None:
        self.mark = mark
        super().__init__(
            f"publication {publication!r}: retention dropped its messages up to {mark}, after"
            f" the read's start {after}, so this read cannot return all of its range; start at"
            f" {mark} or later (startingOffsets), or keep retention behind it with a"
            " subscription"
        )


def mark_statement(publication: str) -> sql.Composed:
    """The mark's query with the publication as a literal (ADBC runs it without parameters)."""
    return sql.SQL(spark_queries()["spark_retired_up_to"]).format(
        publication=sql.Literal(publication)
    )


def refuse_retired(publication: str, after: Position, mark_row: tuple[Any, ...] | None) -> None:
    """Raise if retention dropped any message after `after`: the mark (the row of
    mark_statement, None if nothing was ever dropped) lies past it."""
    if mark_row is None:
        return
    mark = Position(int(mark_row[0]), int(mark_row[1]))
    if mark > after:
        raise RetiredRangeError(publication, after, mark)
