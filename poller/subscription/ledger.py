"""The unfinished stream messages of the current epoch, in read order, and the checkpoint."""

import collections
from collections.abc import Iterator, Sequence
from typing import Generic, TypeVar

from outbox.positions import Position

T = TypeVar("T")


class Ledger(Generic[T]):
    """Keeps only unfinished messages, each with the position read just before it.

    The checkpoint is the position read just before the oldest unfinished message: the
    greatest read position with everything at or below it finished. Finished messages are
    forgotten at once (O(1) on an OrderedDict), so one slow message costs no memory for the
    thousands finished behind it, and a message skipped by a strategy still holds the
    checkpoint back (KurrentDB #5497 computed it from dispatched messages only).
    """

    def __init__(self, start: Position) -> None:
        self._last_read = start
        self._unfinished: collections.OrderedDict[Position, tuple[Position, T]] = (
            collections.OrderedDict()
        )

    @property
    def checkpoint(self) -> Position:
        for previous, _item in self._unfinished.values():
            return previous
        return self._last_read

    @property
    def next_read_position(self) -> Position:
        """The last position read in this epoch: the next keyset read starts after it."""
        return self._last_read

    def __len__(self) -> int:
        return len(self._unfinished)

    def validate_batch(self, positions: Sequence[Position]) -> None:
        """Reject a read that is not strictly ascending past everything already read.

        A position at or below the last read would re-enter a finished message or reorder the
        stream; it can only come from a daemon bug, so it is an error, not a duplicate.
        """
        previous = self._last_read
        for position in positions:
            if not position > previous:
                raise ValueError(
                    f"read position {position} is not after {previous}: reads must ascend"
                    " past next_read_position"
                )
            previous = position

    def add(self, position: Position, item: T) -> None:
        """Record a read; the caller has validated the batch it belongs to."""
        self._unfinished[position] = (self._last_read, item)
        self._last_read = position

    def get(self, position: Position) -> T | None:
        entry = self._unfinished.get(position)
        return None if entry is None else entry[1]

    def oldest(self) -> T | None:
        """The unfinished message read first, if any."""
        for _previous, item in self._unfinished.values():
            return item
        return None

    def finish(self, position: Position) -> None:
        del self._unfinished[position]

    def items(self) -> Iterator[T]:
        for _previous, item in self._unfinished.values():
            yield item

    def skip_read_to(self, to: Position) -> None:
        """An admin skip past the last read: reading resumes after `to`, and the checkpoint
        with it. The caller has finished every message at or below `to` (so all of them)."""
        if to > self._last_read:
            assert not self._unfinished, "skip_read_to past unfinished messages"
            self._last_read = to

    def reset(self, to: Position) -> None:
        """Forget everything; reading resumes after `to` (a seek)."""
        self._unfinished.clear()
        self._last_read = to
