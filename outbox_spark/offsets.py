"""Spark offsets of the outbox source: the last row a batch includes. Pure, no I/O.

An offset is `{"tx": transaction_id, "pos": position}`, always built here so the keys come in
one order: Spark writes offsets to its log as JSON and compares them as text, so
`{"pos": 1, "tx": 2}` would count as new data. A batch is `(start, end]`, compared as the row
value `(transaction_id, position)` exactly as the read_batch query does.
"""

from collections.abc import Mapping

from outbox.positions import START, Position


class OffsetError(ValueError):
    """An offset that this source did not write (a corrupt log or a hand-made option)."""


def offset_of(position: Position) -> dict[str, int]:
    return {"tx": position.transaction_id, "pos": position.position}


def position_of(offset: Mapping[str, object]) -> Position:
    if not isinstance(offset, Mapping) or set(offset) != {"tx", "pos"}:
        raise OffsetError(f'an offset is {{"tx": TX, "pos": POS}}, got {offset!r}')
    return Position(_count(offset["tx"], offset), _count(offset["pos"], offset))


def _count(value: object, offset: Mapping[str, object]) -> int:
    # bool is an int subclass, and a float or a string here means someone else wrote it.
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise OffsetError(f"offset values must be non-negative integers, got {dict(offset)!r}")
    return value


EARLIEST = offset_of(START)


def next_end(start: Position, candidate: Position | None, ceiling: Position | None) -> Position:
    """The end of the next batch.

    `candidate` is what the database offered after `start` (None: no safe row yet) and
    `ceiling` the Trigger.AvailableNow target, if any. Cutting a candidate at the ceiling never
    exceeds the row limit: the rows of (start, ceiling] are a subset of (start, candidate]. The
    end never moves behind `start`, which can lie past the ceiling when a query was started
    from a hand-given offset.
    """
    if candidate is None:
        return start
    if ceiling is not None and candidate > ceiling:
        return max(start, ceiling)
    return candidate
