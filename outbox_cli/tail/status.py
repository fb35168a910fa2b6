"""The status bar: phase, messages seen, rate and lag. Pure: every reading takes the time.

Rate is the messages received in the last RATE_WINDOW seconds, counted per whole second so
memory stays flat however busy the stream. Lag is how old the newest message was when it
arrived: arrival time minus `appended_at`, which is the writer transaction's start, so a long
writer transaction shows as lag too.
"""

import datetime
import math
from collections import deque
from dataclasses import dataclass, field

from outbox_cli.printing import escaped

RATE_WINDOW = 5  # seconds


def duration_text(seconds: float) -> str:
    """0.25s, 12.0s, 3m 05s, 2h 07m: short enough for a status bar."""
    seconds = max(seconds, 0.0)
    if seconds < 60:
        return f"{seconds:.1f}s" if seconds >= 1 else f"{seconds:.2f}s"
    minutes, whole_seconds = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m {whole_seconds:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h {minutes:02d}m"


@dataclass
class StreamStatus:
    publication: str
    started_at: float
    live: bool = False
    messages: int = 0
    checkpoints: int = 0
    lag: datetime.timedelta | None = None
    failure: str | None = None
    # [whole second, messages received in it], oldest first, at most RATE_WINDOW entries.
    _per_second: deque[list[int]] = field(default_factory=deque)

    def message_received(
        self, appended_at: datetime.datetime, now: float, wall_now: datetime.datetime
    ) -> None:
        self.messages += 1
        self.lag = wall_now - appended_at
        second = int(now)
        if self._per_second and self._per_second[-1][0] == second:
            self._per_second[-1][1] += 1
        else:
            self._per_second.append([second, 1])
        self._forget_before(now)

    def _forget_before(self, now: float) -> None:
        first_second = math.floor(now) - RATE_WINDOW + 1
        while self._per_second and self._per_second[0][0] < first_second:
            self._per_second.popleft()

    def rate(self, now: float) -> float:
        """Messages per second over the current second and the RATE_WINDOW - 1 before it,
        divided by the time they cover (less at the start)."""
        self._forget_before(now)
        counted = sum(count for _second, count in self._per_second)
        first_second = math.floor(now) - RATE_WINDOW + 1
        covered = min(now - first_second, now - self.started_at)
        # At least a second: one message in the first millisecond is not 1,000 a second.
        return counted / max(covered, 1.0)

    def text(self, now: float, rows: int, row_limit: int) -> str:
        phase = "LIVE" if self.live else "CATCHING UP"
        if self.failure is not None:
            phase = f"STOPPED: {self.failure}"
        lag = "-" if self.lag is None else duration_text(self.lag.total_seconds())
        parts = (
            phase,
            f"publication {escaped(self.publication)}",
            f"{self.messages:,} messages",
            f"{self.checkpoints:,} checkpoints",
            f"{self.rate(now):,.1f}/s",
            f"lag {lag}",
            f"rows {rows:,}/{row_limit:,}",
        )
        return " · ".join(parts)
