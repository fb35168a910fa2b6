"""The confirmations operators were shown, each good for one action.

A confirmation page keeps what it showed (the action and what it counted) here, under a
random id its form carries; posting the form takes it out, so a second post of the same form
(a reload, a double click, the back button) finds nothing and changes nothing. The form
carries nothing else to act on: what is acted on is what the page showed, whatever a post
says. A confirmation belongs to the session it was shown to and lasts LIFETIME_SECONDS; like
the sessions, it lives in this process's memory (a restart forgets it, as it forgets the CSRF
key its form was signed with).
"""

import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, NamedTuple, TypeVar

LIFETIME_SECONDS = 3600.0
# Only signed-in operators make them, one a confirmation page: this bounds what one can grow.
MAX_CONFIRMATIONS = 10_000

Shown = TypeVar("Shown")


class _Kept(NamedTuple, Generic[Shown]):
    session_id: str
    shown: Shown
    made_at: float


class Confirmations(Generic[Shown]):
    def __init__(
        self, lifetime: float = LIFETIME_SECONDS, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._lifetime = lifetime
        self._clock = clock
        self._kept: OrderedDict[str, _Kept[Shown]] = OrderedDict()
        # Pages are served from a thread pool: two posts of one form must not both take it.
        self._lock = threading.Lock()

    def keep(self, session_id: str, shown: Shown) -> str:
        """Keep what a confirmation page shows to `session_id`; the id its form carries."""
        confirmation_id = secrets.token_urlsafe(24)
        with self._lock:
            self._kept[confirmation_id] = _Kept(session_id, shown, self._clock())
            while len(self._kept) > MAX_CONFIRMATIONS:
                self._kept.popitem(last=False)
        return confirmation_id

    def shown(self, session_id: str, confirmation_id: str | None) -> Shown | None:
        """What the confirmation showed, left in place (to name a refused action)."""
        with self._lock:
            kept = self._current(session_id, confirmation_id)
        return None if kept is None else kept.shown

    def take(self, session_id: str, confirmation_id: str | None) -> Shown | None:
        """What the confirmation showed, taken out: None when it was taken before, is too
        old, belongs to another session or never was."""
        with self._lock:
            kept = self._current(session_id, confirmation_id)
            if kept is None:
                return None
            assert confirmation_id is not None  # _current found it
            del self._kept[confirmation_id]
        return kept.shown

    def _current(self, session_id: str, confirmation_id: str | None) -> _Kept[Shown] | None:
        kept = None if confirmation_id is None else self._kept.get(confirmation_id)
        if kept is None or kept.session_id != session_id:
            return None
        if self._clock() - kept.made_at > self._lifetime:
            assert confirmation_id is not None
            del self._kept[confirmation_id]
            return None
        return kept
