"""The lines that say what holds retention back, for `outbox status` and `outbox prune`."""

from outbox_cli.printing import cell, console
from poller.store.retention_store import RetentionHolder

_WHAT = {
    "subscription": "subscription",
    "spark": "Spark query",
    "consumer": "consumer",
    "parked": "a parked message of subscription",
}


def holder_line(holder: RetentionHolder, stale_after: float) -> str:
    """One partition's holder: who, since when, and whether that is past stale_after."""
    since = "" if holder.held_since is None else f" since {holder.held_since:%Y-%m-%d %H:%M:%S%z}"
    age = holder.held_for_seconds
    stale = age is not None and age > stale_after and holder.kind != "parked"
    line = (
        f"retention of {holder.partition} (positions {holder.first_position} to"
        f" {holder.end_position - 1}) held by {_WHAT.get(holder.kind, holder.kind)}"
        f" {holder.holder}{since}"
    )
    if age is not None:
        line += f" ({age:.0f} s)"
    if stale:
        line += f": STALE, it has not passed these messages for over {stale_after:g} s"
    return line


def print_oldest_holder(holders: list[RetentionHolder], stale_after: float) -> None:
    """The holder of the oldest held partition is the one that holds retention back."""
    if holders:
        console().print(cell(holder_line(holders[0], stale_after)))
