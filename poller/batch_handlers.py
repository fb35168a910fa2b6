"""Batch handlers: one call for many messages, for relays and projections that write in bulk.

    @poller.batch_handler(max_batch_size=200, max_batch_wait=0.01)
    def publish(messages: list[Message]) -> None: ...

Returning None finishes every message of the batch; raising fails them all, each then
following the retry and park rules (RetryMessage, ParkMessage and SkipMessage apply to all).
A handler may instead return a mapping from a message's position (`message.at`) to the
exception that message would have raised; the messages it does not name are finished.
"""

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar, cast

from outbox.positions import Position
from poller.message import Message
from poller.printable import error_text, safe_repr
from poller.subscription.settings import READ_BATCH_SIZE

BatchOutcomes = Mapping[Position, BaseException]
"""What a batch handler may return for the messages that did not succeed, by position."""

BatchFunction = Callable[[list[Message]], Any]
F = TypeVar("F", bound=BatchFunction)

_MARK = "__outbox_batch_options__"

# Beyond these a batch holds a consumer's messages for minutes, or a wait hides a stall.
MAX_BATCH_SIZE = 10_000
MAX_BATCH_WAIT = 60.0


@dataclasses.dataclass(frozen=True)
class BatchOptions:
    max_batch_size: int
    """The most messages one call gets."""
    max_batch_wait: float
    """Seconds a batch smaller than max_batch_size waits for more before the call (0: none)."""

    def __post_init__(self) -> None:
        size = self.max_batch_size
        if isinstance(size, bool) or not isinstance(size, int) or not 1 <= size <= MAX_BATCH_SIZE:
            raise ValueError(
                f"max_batch_size must be an integer from 1 to {MAX_BATCH_SIZE}, got {size!r}"
            )
        wait = self.max_batch_wait
        if (
            isinstance(wait, bool)
            or not isinstance(wait, int | float)
            or not math.isfinite(wait)
            or not 0 <= wait <= MAX_BATCH_WAIT
        ):
            raise ValueError(
                f"max_batch_wait must be seconds from 0 to {MAX_BATCH_WAIT:g}, got {wait!r}"
            )


def batch_handler(
    *, max_batch_size: int = READ_BATCH_SIZE, max_batch_wait: float = 0.0
) -> Callable[[F], F]:
    """Mark a function (plain or async) that takes a list of messages as a batch handler; its
    batches are one read's worth by default."""
    options = BatchOptions(max_batch_size, max_batch_wait)

    def mark(function: F) -> F:
        setattr(function, _MARK, options)
        return function

    return mark


def batch_options(handler: object) -> BatchOptions | None:
    """The options a handler was marked with by `batch_handler`; None for one-message handlers."""
    options = getattr(handler, _MARK, None)
    return options if isinstance(options, BatchOptions) else None


def batch_failures(messages: Sequence[Message], result: object) -> list[BaseException | None]:
    """Each message's failure (None: finished) from what a batch handler returned.

    The daemon and its metrics both read a return through this, so they never disagree. A
    malformed return fails the whole batch with an error that says what was wrong with it;
    reading a return never raises (a mapping with unhashable keys once crashed the consumer).
    """
    if result is None:
        return [None] * len(messages)
    try:
        return _read_failures(messages, result)
    except BaseException as error:  # whatever the returned object's methods raise
        unreadable = TypeError(f"a batch handler's return could not be read: {error_text(error)}")
        return [unreadable] * len(messages)


def _read_failures(messages: Sequence[Message], result: object) -> list[BaseException | None]:
    if not isinstance(result, Mapping):
        error: BaseException = TypeError(
            f"a batch handler returns None or a mapping of message positions to exceptions,"
            f" not a {type(result).__name__}"
        )
        return [error] * len(messages)
    failures = cast(Mapping[object, object], result)
    batch = {message.at for message in messages}
    strays = [p for p in failures if not isinstance(p, Position) or p not in batch]
    if strays:
        named = ", ".join(safe_repr(position) for position in strays[:3])
        error = ValueError(f"a batch handler named positions not in its batch: [{named}]")
        return [error] * len(messages)
    found: list[BaseException | None] = []
    for message in messages:
        failure = failures.get(message.at)
        if failure is not None and not isinstance(failure, BaseException):
            failure = TypeError(
                f"a batch handler's outcome must be an exception, not {safe_repr(failure)}"
            )
        found.append(failure)
    return found
