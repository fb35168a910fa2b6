"""Saying why delivery waits.

Any transaction holding an xid anywhere in the cluster, even in another database, holds back
pg_snapshot_xmin and so every poller (measured here: an open SELECT ... FOR UPDATE in another
database delayed delivery by exactly its 2 s). When committed messages have waited behind the
frontier longer than a threshold, the daemon names the blockers once, then again at a low rate
while the stall lasts.
"""

from dataclasses import dataclass


@dataclass
class StallWatch:
    """Decides when to warn; the caller passes the time and whether rows are hidden."""

    threshold: float = 5.0
    repeat_every: float = 60.0
    _hidden_since: float | None = None
    _last_warning: float | None = None
    _oldest: int | None = None

    def observe(self, now: float, *, hidden: bool, oldest: int | None = None) -> bool:
        """True when a warning is due now. `oldest`, the oldest hidden transaction where it is
        known: another one than last time means the frontier passed the one before, so the
        clock starts again (under writers that never stop, every empty read finds rows of
        newer transactions hidden, and none of them waits long)."""
        if not hidden:
            self._hidden_since = None
            self._last_warning = None
            self._oldest = None
            return False
        if self._hidden_since is None or oldest != self._oldest:
            self._hidden_since = now
            self._last_warning = None
            self._oldest = oldest
        if now - self._hidden_since < self.threshold:
            return False
        if self._last_warning is None or now - self._last_warning >= self.repeat_every:
            self._last_warning = now
            return True
        return False

    def waited(self, now: float) -> float:
        return 0.0 if self._hidden_since is None else now - self._hidden_since
