"""When to read again.

Measured here: an empty poll costs about 0.06 ms in the database, while NOTIFY in writer
transactions serialises their commits (0.39x write throughput at 16 clients). So the default
is adaptive polling: read again at once after a read cut short by its row limit (more is
waiting); after a read that found messages up to the safe frontier, wait `minimum`; after an
empty read, wait an interval that doubles from `minimum` to `maximum`. While committed rows
are hidden behind an older open transaction, stay at `hidden_recheck`: that transaction may
end without writing to the outbox, and so without any signal.

A read that found messages up to the frontier has read all there was: one sent at once found
something only if a commit passed the frontier during its round trip, and otherwise was an
empty read followed by the question whether rows are hidden, two statements where a bare
loop reading every `minimum` sends none. Under 16 writers on 2 cores those statements were
the daemon's CPU that the writers and the server wanted (bench/load_bench.py).
"""

from dataclasses import dataclass


@dataclass
class AdaptiveInterval:
    minimum: float = 0.001
    maximum: float = 0.1
    hidden_recheck: float = 0.005
    _current: float = 0.0

    def __post_init__(self) -> None:
        if not 0 < self.minimum <= self.maximum:
            raise ValueError(
                f"poll interval minimum={self.minimum} must be > 0 and <= maximum={self.maximum}"
            )

    def next_delay(self, *, found_messages: bool, hidden_messages: bool, more: bool) -> float:
        """The wait before the next read, after one that found messages or none, with
        committed rows hidden behind the frontier or none, cut short by its row limit with
        `more` to read or not."""
        if more:
            self._current = 0.0
            return 0.0
        if found_messages:
            self._current = 0.0
            return self.minimum
        self._current = min(self.maximum, max(self.minimum, self._current * 2))
        if hidden_messages:
            self._current = min(self._current, self.hidden_recheck)
        return self._current
