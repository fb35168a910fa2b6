"""When to read again.

Measured here: an empty poll costs about 0.06 ms in the database, while NOTIFY in writer
transactions serialises their commits (0.39x write throughput at 16 clients). So the default
is adaptive polling: read again at once after a read that found messages; after an empty
read, wait an interval that doubles from `minimum` to `maximum`. While committed rows are
hidden behind an older open transaction, stay at `hidden_recheck`: that transaction may end
without writing to the outbox, and so without any signal.

Doubling alone backs off too fast while messages flow: at 1,000 tx/s from 16 writers, three
empty reads in a row (a gap of a few ms between commits, or a writer's transaction holding
the frontier) put the next read 4-5 ms away (bench/fixed_rate.py splits where a message
waits). So the wait is also capped at a share of the time since a read last
found messages: a message that follows a quiet spell waits at most about a quarter of that
spell (and at least `minimum`) for the read that finds it. Once quiet for four times the
doubled wait, the cap no longer binds, so an idle daemon polls exactly as before (at
`maximum`).
"""

import time
from dataclasses import dataclass

QUIET_SHARE = 0.25
"""The longest wait after an empty read, as a share of the time since messages were found."""


@dataclass
class AdaptiveInterval:
    minimum: float = 0.001
    maximum: float = 0.1
    hidden_recheck: float = 0.005
    _current: float = 0.0
    _found_at: float | None = None  # when a read last found messages

    def __post_init__(self) -> None:
        if not 0 < self.minimum <= self.maximum:
            raise ValueError(
                f"poll interval minimum={self.minimum} must be > 0 and <= maximum={self.maximum}"
            )

    def next_delay(
        self, *, found_messages: bool, hidden_messages: bool, now: float | None = None
    ) -> float:
        now = time.monotonic() if now is None else now
        if found_messages:
            self._current = 0.0
            self._found_at = now
            return 0.0
        self._current = min(self.maximum, max(self.minimum, self._current * 2))
        if hidden_messages:
            self._current = min(self._current, self.hidden_recheck)
        if self._found_at is None:
            return self._current
        return min(self._current, max(self.minimum, (now - self._found_at) * QUIET_SHARE))
