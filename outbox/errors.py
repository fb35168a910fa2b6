"""Errors the writer raises. Each names the field and the value that was refused."""


class OutboxError(Exception):
    """Base class of every error this package raises on purpose."""


class InvalidMessageError(OutboxError, ValueError):
    """A message was refused before any SQL ran, so the caller's transaction is still usable."""

    def __init__(self, field: str, value: object, reason: str) -> None:
        self.field = field
        self.value = value
        self.reason = reason
        shown = repr(value)
        if len(shown) > 80:
            shown = shown[:77] + "..."
        super().__init__(f"{field}={shown}: {reason}")


class UnsupportedConnectionError(OutboxError, TypeError):
    """append() was given something that is not a connection it knows how to write through."""
