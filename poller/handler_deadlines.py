"""When the daemon fails the handler call that runs now, for handlers that wait on something.

A handler that waits on a broker or an API bounds its waits by `call_deadline()` and gives up
first, raising `DestinationUnavailable`: then an outage that outlasts message_timeout is an
outage (nothing counted, nothing parked), not a timed-out attempt. The relays do.
"""

import contextlib
import contextvars
from collections.abc import Iterator

_DEADLINE: contextvars.ContextVar[float | None] = contextvars.ContextVar(
    "outbox_call_deadline", default=None
)


def call_deadline() -> float | None:
    """The `time.monotonic()` at which the daemon fails the handler call running in this
    context: when the call started plus n x message_timeout for a call of n messages. None
    outside a daemon's handler call."""
    return _DEADLINE.get()


@contextlib.contextmanager
def calling_until(deadline: float | None) -> Iterator[None]:
    """Run a handler call with `deadline` as its `call_deadline()` (an async handler's
    task and a sync handler's thread each have their own context)."""
    token = _DEADLINE.set(deadline)
    try:
        yield
    finally:
        _DEADLINE.reset(token)
