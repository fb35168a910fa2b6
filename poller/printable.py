"""Text for what a handler raised or returned, which must never raise itself.

A handler's exception may have a `__str__` (or `__repr__`) that raises: formatting it for the
outcome once crashed the consumer slot in a tight loop that starved the event loop.
"""


def error_text(error: BaseException) -> str:
    """`Type: message`, or `Type` alone when the message is empty; the repr when `str()`
    fails, and "unprintable exception" when that fails too."""
    name = type(error).__name__
    try:
        text = str(error)
    except BaseException:  # any failure of the handler's own __str__ is its to have
        text = f"{safe_repr(error)} (str() failed)"
    return f"{name}: {text}" if text else name


def safe_repr(value: object) -> str:
    try:
        return repr(value)
    except BaseException:  # a __repr__ that raises, whatever it raises
        return f"<unprintable {type(value).__name__}>"
