"""Text for what a handler raised or returned, which must never raise itself.

A handler's exception may have a `__str__` (or `__repr__`) that raises: formatting it for the
outcome once crashed the consumer slot in a tight loop that starved the event loop.
"""

import traceback
from pathlib import PurePath

from outbox.storable_text import DEFAULT_LIMIT, storable_text

# Where a failure was raised, as `outbox parked show` prints it: the innermost calls, which
# are the handler's own; enough to find the line, bounded so the error text keeps its room.
FAILURE_FRAMES = 3
_FRAME_PART = 120
# Stored texts are cut at DEFAULT_LIMIT; the machine adds " (attempt 9 of 10)" when it parks,
# which must not push the place out.
FAILURE_TEXT_LIMIT = DEFAULT_LIMIT - 100


def error_text(error: BaseException) -> str:
    """`Type: message`, or `Type` alone when the message is empty; the repr when `str()`
    fails, and "unprintable exception" when that fails too."""
    name = type(error).__name__
    try:
        text = str(error)
    except BaseException:  # any failure of the handler's own __str__ is its to have
        text = f"{safe_repr(error)} (str() failed)"
    return f"{name}: {text}" if text else name


def failure_text(error: BaseException, text: str | None = None) -> str:
    """`text` (by default `error_text(error)`) and where `error` was raised, on one line:
    `ValueError: bad (raised at app/db.py:40 in save, from app/handlers.py:12 in on_order)`,
    at most FAILURE_TEXT_LIMIT characters whatever the message's length, so the place
    survives the cut that storing it makes. The outermost frame is the daemon's call of the handler,
    and is left out."""
    text = error_text(error) if text is None else text
    try:
        frames = traceback.extract_tb(error.__traceback__)[1:][-FAILURE_FRAMES:]
    except Exception:  # a traceback is the interpreter's; never let reading it fail a run
        frames = traceback.StackSummary()
    if not frames:
        return storable_text(text, FAILURE_TEXT_LIMIT)
    places = [
        f"{_tail(PurePath(frame.filename).parts[-2:])}:{frame.lineno} in {frame.name[:80]}"
        for frame in reversed(frames)
    ]
    where = storable_text(f" (raised at {', from '.join(places)})")
    return storable_text(text, FAILURE_TEXT_LIMIT - len(where)) + where


def _tail(parts: tuple[str, ...]) -> str:
    path = "/".join(parts)
    return path if len(path) <= _FRAME_PART else "..." + path[-_FRAME_PART:]


def safe_repr(value: object) -> str:
    try:
        return repr(value)
    except BaseException:  # a __repr__ that raises, whatever it raises
        return f"<unprintable {type(value).__name__}>"
