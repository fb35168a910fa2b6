"""How a handler call ended, classified once, and the one tap that tells its observers.

The handler caller (handler_caller.py) reads each call's return or exception here, once: the
state machine's outcome (`runs.outcome_of`), the metrics' label, the failure log's "is this
a failure" and the span's status all come from the same `Ending`. Observers see calls as
dramatiq's middleware sees a message's lifecycle (`dramatiq/middleware/prometheus.py`):
`call_started` right before the handler runs, on its thread or task (a span is made current
there), `call_ended` after every call, `call_failed` after a call the handler failed. An
observer overrides only the hooks it needs, and the tap calls only those: with the failure
log alone (no metrics port, no tracing) a call that succeeds costs the tap nothing.
"""

import enum
from collections.abc import Sequence
from typing import Any, NamedTuple

from poller.handler_requests import DestinationUnavailable, ParkMessage, RetryMessage, SkipMessage
from poller.message import Message


class Ending(enum.Enum):
    """How the handler ended one message's call; the value is the metrics' outcome label."""

    DELIVERED = "delivered"
    SKIPPED = "skipped"
    FAILED = "failed"
    RETRY_REQUESTED = "retry_requested"
    PARK_REQUESTED = "park_requested"
    UNAVAILABLE = "destination_unavailable"


def ending_of(error: BaseException | None) -> Ending:
    """A handler's return (None) or exception; anything but the outcome requests
    (`poller.handler_requests`) is a failure, `BaseException`s included."""
    if error is None:
        return Ending.DELIVERED
    if isinstance(error, SkipMessage):
        return Ending.SKIPPED
    if isinstance(error, ParkMessage):
        return Ending.PARK_REQUESTED
    if isinstance(error, RetryMessage):
        return Ending.RETRY_REQUESTED
    if isinstance(error, DestinationUnavailable):
        return Ending.UNAVAILABLE
    return Ending.FAILED


class HandlerCall(NamedTuple):
    """One call of the handler: one message, or a batch handler's list."""

    messages: Sequence[Message]
    errors: Sequence[BaseException | None]
    """Per message: what the call raised, or what a batch handler's return named for it."""
    endings: Sequence[Ending]
    """Per message, from `errors`."""
    raised: BaseException | None
    """What the call itself raised (a batch call: for all its messages)."""
    started: float
    """When the run claimed the call's deliveries (time.monotonic()), as the machine times it."""
    ended: float
    timed_out: bool
    """It returned at or past its deadline (n x message_timeout): the machine has failed it,
    whatever it returned."""

    @property
    def duration(self) -> float:
        return self.ended - self.started


class CallObserver:
    """Sees handler calls through the tap; override the hooks you need. Hooks run on the
    handler's thread (a plain `def` handler) or the event loop, and must not raise."""

    def call_started(self, messages: Sequence[Message]) -> Any:  # noqa: ARG002
        """Right before the handler is called, in its context; the return comes back to
        `call_ended` (a span, and the token that made it current)."""
        return None

    def call_ended(self, call: HandlerCall, started: Any) -> None:
        """After every call, in the handler's context, `started` what `call_started` gave."""

    def call_failed(self, call: HandlerCall) -> None:
        """After a call with at least one FAILED ending (not a daemon's own cancellation)."""


def _overrides(observer: CallObserver, hook: str) -> bool:
    return getattr(type(observer), hook) is not getattr(CallObserver, hook)


class CallTap:
    """The observers of one subscription's handler calls, sorted by the hooks they override."""

    __slots__ = ("_ending", "_failing", "_starting", "watching")

    def __init__(self, observers: Sequence[CallObserver]) -> None:
        self._starting = [o for o in observers if _overrides(o, "call_started")]
        # Each with where its own `call_started` answer sits in what `started` returns.
        self._ending = [
            (o, self._starting.index(o) if o in self._starting else None)
            for o in observers
            if _overrides(o, "call_ended")
        ]
        self._failing = [o for o in observers if _overrides(o, "call_failed")]
        self.watching = bool(self._starting or self._ending)
        """Some observer sees every call: the caller builds a HandlerCall for each, not only
        for failures."""

    def started(self, messages: Sequence[Message]) -> list[Any]:
        return [observer.call_started(messages) for observer in self._starting]

    def ended(self, call: HandlerCall, started: list[Any] | None, *, failures: bool) -> None:
        """`started`: what `started()` returned (None when not watching); `failures`: tell
        `call_failed` too (False for a call the daemon itself cancelled)."""
        if started is not None:
            for observer, index in self._ending:
                observer.call_ended(call, None if index is None else started[index])
        if failures and Ending.FAILED in call.endings:
            for observer in self._failing:
                observer.call_failed(call)
