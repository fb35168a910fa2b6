"""Handler failures said out loud at the default log level, without flooding it.

Under the defaults a failing message is retried for about half a minute before it parks, and
its key waits meanwhile: an operator must see why, at INFO, while it happens. So the first
failure of a message is logged at WARNING with its traceback (as is anything that is not an
`Exception`, whichever attempt: `KeyboardInterrupt` would end an ordinary program). Later
attempts log at DEBUG: the first said why, and the park (WARNING) says how it ended. A poison
storm, every message failing at once, would write a traceback per message: at most
`TRACEBACKS_PER_WINDOW` are written per `WINDOW_SECONDS` and subscription, and the next one
written says how many were left out. What a handler raises to choose its outcome
(`DestinationUnavailable`, `RetryMessage`, `ParkMessage`, `SkipMessage`) is not a failure
here: a relay's broker outage must not write a traceback per retry.

It observes handler calls at the one tap (handler_calls.py): told only of calls the handler
failed, as classified there.
"""

import logging
import threading
import time
from collections.abc import Callable, Sequence

from poller.daemon.delivery.handler_calls import CallObserver, Ending, HandlerCall
from poller.message import Message

log = logging.getLogger(__name__)

TRACEBACKS_PER_WINDOW = 10
WINDOW_SECONDS = 60.0


class LogBudget:
    """At most `allowed` lines per `window` seconds; pure (time comes in as `now`)."""

    def __init__(self, allowed: int = TRACEBACKS_PER_WINDOW, window: float = WINDOW_SECONDS):
        self._allowed = allowed
        self._window = window
        self._window_start: float | None = None
        self._used = 0
        self._left_out = 0

    def take(self, now: float) -> int | None:
        """None when this line must be left out (it is counted); otherwise how many were left
        out since the last line allowed."""
        if self._window_start is None or now - self._window_start >= self._window:
            self._window_start, self._used = now, 0
        if self._used == self._allowed:
            self._left_out += 1
            return None
        self._used += 1
        left_out, self._left_out = self._left_out, 0
        return left_out


class FailureLog(CallObserver):
    """One subscription's handler failures; called from handler threads and the loop."""

    def __init__(
        self,
        subscription: str | None = None,
        budget: LogBudget | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._subscription = subscription
        self._budget = budget or LogBudget()
        self._clock = clock
        self._lock = threading.Lock()

    def call_failed(self, call: HandlerCall) -> None:
        """A batch call that raised is one failure of its messages; a batch return's
        failures are each their message's."""
        if call.raised is not None and len(call.messages) > 1:
            first = any(message.delivery_attempt == 1 for message in call.messages)
            self.failed(call.messages, call.raised, first)
            return
        for message, error, ending in zip(call.messages, call.errors, call.endings, strict=True):
            if ending is Ending.FAILED and error is not None:
                self.failed(message, error, message.delivery_attempt == 1)

    def failed(
        self, subject: Message | Sequence[Message], error: BaseException, first: bool
    ) -> None:
        """`subject` (a message, or a batch handler's messages) failed with `error`; `first`:
        on the first attempt of (one of) them."""
        ordinary = isinstance(error, Exception)
        if ordinary and not first:
            log.debug("handler failed again on %s", _named(subject), exc_info=error)
            return
        with self._lock:
            left_out = self._budget.take(self._clock())
        if left_out is None:
            log.debug("handler failed on %s", _named(subject), exc_info=error)
            return
        whose = f"subscription {self._subscription}: " if self._subscription else ""
        also = (
            f" ({left_out} more handler failures left out of the log before this one)"
            if left_out
            else ""
        )
        context = _context(subject, self._subscription)
        if ordinary:
            log.warning(
                "%shandler failed on %s (its first attempt; retried with backoff up to"
                " max_retry_count)%s",
                whose,
                _named(subject),
                also,
                exc_info=error,
                extra=context,
            )
        else:
            log.warning(
                "%shandler raised %s on %s: counted as a failed attempt, the daemon goes on%s",
                whose,
                type(error).__name__,
                _named(subject),
                also,
                exc_info=error,
                extra=context,
            )


def _named(subject: Message | Sequence[Message]) -> str:
    if isinstance(subject, Message):
        return repr(subject)
    if len(subject) == 1:
        return repr(subject[0])
    return f"a batch of {len(subject)} messages from {subject[0]!r} to {subject[-1]!r}"


def _context(subject: Message | Sequence[Message], subscription: str | None) -> dict[str, object]:
    """What the JSON log lines carry (handler threads have no log context of their own)."""
    context: dict[str, object] = {"subscription": subscription}
    if isinstance(subject, Message):
        context |= {"position": str(subject.at), "message_id": subject.message_id}
    return context
