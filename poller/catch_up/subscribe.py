"""`subscribe` and `subscribe_sync`: a publication's messages from a chosen start, CaughtUp
once the backlog is read, then live messages and Checkpoint signals.

Every argument is checked here, before a connection is opened, so a bad value fails at the
call with one line naming it.
"""

import contextlib
from collections.abc import AsyncGenerator, Generator, Iterable

from outbox.messages import check_name
from outbox.positions import MAX_PART
from poller.catch_up.settings import checkpoint_settings
from poller.catch_up.signals import Checkpoint
from poller.catch_up.stream import Filter, Item, Plan, pages, stream
from poller.catch_up.sync_bridge import iterate_in_thread


def subscribe(
    url: str,
    publication: str,
    *,
    start: str | Checkpoint = "start",
    message_types: Iterable[str] | None = None,
    partition_key: str | None = None,
    checkpoint_interval: int | None = None,
    checkpoint_timeout: float | None = None,
) -> AsyncGenerator[Item]:
    """Async iterator over `publication`: Messages, one CaughtUp, then live Messages and
    Checkpoints. `start` is "start", "end" (the safe frontier) or a Checkpoint. The
    checkpoint settings default to OUTBOX_CHECKPOINT_INTERVAL and
    OUTBOX_CHECKPOINT_TIMEOUT_SECS."""
    return stream(
        _plan(
            url,
            publication,
            start,
            message_types,
            partition_key,
            checkpoint_interval,
            checkpoint_timeout,
        )
    )


def subscribe_sync(
    url: str,
    publication: str,
    *,
    start: str | Checkpoint = "start",
    message_types: Iterable[str] | None = None,
    partition_key: str | None = None,
    checkpoint_interval: int | None = None,
    checkpoint_timeout: float | None = None,
) -> Generator[Item]:
    """`subscribe` for plain code: the same stream, driven on a private event loop thread.
    Close it (or leave the for loop) to release its connections."""
    plan = _plan(
        url,
        publication,
        start,
        message_types,
        partition_key,
        checkpoint_interval,
        checkpoint_timeout,
    )
    return _flattened(iterate_in_thread(lambda: pages(plan)))


def _flattened(each_page: Generator[list[Item]]) -> Generator[Item]:
    """One item at a time, from pages taken one hop each; closing it closes the pages'."""
    with contextlib.closing(each_page):
        for page in each_page:
            yield from page


def _plan(
    url: str,
    publication: str,
    start: object,
    message_types: Iterable[str] | None,
    partition_key: str | None,
    checkpoint_interval: object,
    checkpoint_timeout: object,
) -> Plan:
    settings = checkpoint_settings(checkpoint_interval, checkpoint_timeout)
    check_name("publication", publication)
    return Plan(
        url=url,
        publication=publication,
        start=_checked_start(start),
        filter=Filter(_checked_types(message_types), _checked_key(partition_key)),
        checkpoint_interval=settings.checkpoint_interval,
        checkpoint_timeout=settings.checkpoint_timeout_secs,
    )


def _checked_start(start: object) -> str | Checkpoint:
    if isinstance(start, Checkpoint):
        if not all(type(part) is int and 0 <= part <= MAX_PART for part in start):
            raise ValueError(f"start={start!r}: each part must be an int from 0 to {MAX_PART}")
        return start
    if start in ("start", "end"):
        return str(start)
    raise ValueError(f"start={start!r} is not 'start', 'end' or a poller.Checkpoint")


def _checked_types(message_types: Iterable[str] | None) -> frozenset[str] | None:
    if message_types is None:
        return None
    # A bare string is iterable too: "OrderPlaced" would become the types "O", "r", "d"...
    if isinstance(message_types, str | bytes):
        raise ValueError(
            f"message_types={message_types!r} is a string; pass a list such as [{message_types!r}]"
        )
    types = frozenset(message_types)
    if not types or not all(isinstance(name, str) for name in types):
        raise ValueError(f"message_types={sorted(map(repr, types))} must be non-empty strings")
    return types


def _checked_key(partition_key: str | None) -> str | None:
    if partition_key is not None and not isinstance(partition_key, str):
        raise ValueError(f"partition_key={partition_key!r} is not a string")
    return partition_key
