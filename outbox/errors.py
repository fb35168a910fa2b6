"""Errors the writer raises. Each names the field and the value that was refused."""


class OutboxError(Exception):
    """Base class of every error this package raises on purpose."""


class InvalidMessageError(OutboxError, ValueError):
    """A message was refused before any SQL ran, so the caller's transaction is still usable."""

    def __init__(self, field: str, value: object, reason: str) -> None:
        self.field = field
        self.value = value
        self.reason = reason
        super().__init__(f"{field}={_shown(value)}: {reason}")


def _shown(value: object) -> str:
    try:
        shown = repr(value)
    except RecursionError:  # a value refused for its depth is too deep for repr as well
        return f"<{type(value).__name__} nested too deeply to show>"
    return shown if len(shown) <= 80 else shown[:77] + "..."


class WriterSettingsError(OutboxError, ValueError):
    """An OUTBOX_* variable the writer reads was refused; the message names it and its value.
    Raised before any SQL ran, so the caller's transaction is still usable."""


class UnsupportedConnectionError(OutboxError, TypeError):
    """append() was given something that is not a connection it knows how to write through."""
