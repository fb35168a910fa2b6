"""Whether `outbox poll` may deliver a subscription: the check the daemon's workers make at
every term, and the command line before it starts one (so a wrong name fails at once)."""

from typing import Protocol, TypeVar


class _Consumed(Protocol):
    """A subscription as the daemon's store or the operator façade reads it."""

    @property
    def kind(self) -> str | None: ...


Consumed = TypeVar("Consumed", bound=_Consumed)


class NotPollableError(LookupError):
    """The subscription does not exist, or something other than the daemon consumes it."""


def check_pollable(name: str, record: Consumed | None) -> Consumed:
    if record is None:
        raise NotPollableError(f"subscription {name!r} does not exist")
    if record.kind is not None:
        # Two consumers of one subscription row would move one checkpoint for both.
        raise NotPollableError(
            f"subscription {name!r} records a {record.kind} query's progress;"
            f" the {record.kind} job reads it, not `outbox poll`"
        )
    return record
