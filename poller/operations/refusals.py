"""How the operator façade refuses what an operator asked for: its errors, and how a value
the operator typed is quoted in them."""

# Values quoted in errors are cut to this many characters: a 10 MB name must not become a
# 10 MB error line.
_QUOTED_LIMIT = 80


class SubscriptionError(ValueError):
    """An operator asked for something that cannot be done now; the message says why (a
    missing subscription, a position the database refuses, a change while one drains)."""


class NotFoundError(SubscriptionError):
    """What the operator named does not exist: a subscription, a message, a parked message.
    A front end that addresses things by name says so as such (the console answers 404)."""


class RefusedValueError(SubscriptionError):
    """A value refused for its form alone (not TX:POS, out of range): whatever the database
    holds, the command as typed can never work. The CLI exits 2 for it, 1 for the others."""


def quoted(value: str) -> str:
    """`value` as repr shows it, cut to a recognisable start when it is long."""
    shown = repr(value)
    if len(shown) <= _QUOTED_LIMIT:
        return shown
    return f"{shown[: _QUOTED_LIMIT - 3]}... ({len(value)} characters)"
