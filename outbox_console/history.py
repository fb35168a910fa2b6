"""The last hour of each subscription's backlog and delivery rate, as this console process
sampled it. Nothing is stored in the database: a restarted console starts an empty history,
and two consoles keep two.
"""

from collections import deque
from collections.abc import Iterable
from typing import NamedTuple

from outbox.positions import Position
from poller.membership import ShardUnit


class Point(NamedTuple):
    at: float
    """Seconds since the epoch (the console's clock)."""
    behind: int | None
    rate: float | None
    """Messages a second the checkpoints passed since the point before (None: unknown)."""


class ShardPlace(NamedTuple):
    subscription: str
    unit: ShardUnit


class History:
    def __init__(self, keep_seconds: float, interval: float) -> None:
        self.keep_seconds = keep_seconds
        self._length = max(2, int(keep_seconds / interval) + 2)
        self._points: dict[str, deque[Point]] = {}

    def add(self, subscription: str, point: Point) -> None:
        points = self._points.setdefault(subscription, deque(maxlen=self._length))
        points.append(point)

    def points(self, subscription: str, now: float) -> list[Point]:
        """The points of the last `keep_seconds` before `now`, oldest first."""
        return [p for p in self._points.get(subscription, ()) if p.at >= now - self.keep_seconds]

    def keep_only(self, subscriptions: Iterable[str]) -> None:
        """Forget deleted subscriptions."""
        kept = set(subscriptions)
        for name in list(self._points):
            if name not in kept:
                del self._points[name]


def passed_between(
    before: dict[ShardPlace, Position], after: dict[ShardPlace, Position]
) -> list[tuple[ShardPlace, Position, Position]]:
    """Each shard whose checkpoint moved forward between two samples, with both places (a seek
    back, or a shard that came or went with a change of the count, passed nothing)."""
    return [
        (place, before[place], at)
        for place, at in after.items()
        if place in before and before[place] < at
    ]
