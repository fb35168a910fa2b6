"""The lines that say what holds retention back, for `outbox status` and `outbox prune`."""

import datetime

from outbox.positions import readable
from outbox_cli.printing import cell, console, time_text
from poller.operations import ArchiveStatus, PartitionHolder, RetentionHolder

_WHAT = {
    "subscription": "subscription",
    "spark": "Spark query",
    "consumer": "consumer",
    "parked": "a parked message of subscription",
    "archive": "the archive of publication",
}

WAITING_FOR_THE_ARCHIVE = "waiting for the archive"


def _waiting(kind: str, holder: str | None) -> str:
    """What an archive's hold means: its messages after the archive's mark are not archived
    yet, and go once `outbox spark archive` has archived them."""
    if kind != "archive":
        return ""
    return f": {WAITING_FOR_THE_ARCHIVE} (`outbox spark archive --publication {holder}`)"


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
    line += _waiting(holder.kind, holder.holder)
    if stale:
        line += f": STALE, it has not passed these messages for over {stale_after:g} s"
    return line


def print_oldest_holder(holders: list[RetentionHolder], stale_after: float) -> None:
    """The holder of the oldest held partition is the one that holds retention back."""
    if holders:
        console().print(cell(holder_line(holders[0], stale_after)))


def partition_line(partition: PartitionHolder, minimum_age: float) -> str:
    """One partition, as `outbox prune --dry-run` explains it: what keeps it, or that nothing
    does, and when that ends where the clock decides (the minimum age, closing by age)."""
    p = partition.partition
    count = "1 message" if p.messages == 1 else f"{p.messages} messages"
    head = f"{p.name} (positions {p.first_position} to {p.end_position - 1}, {count})"
    kind, holder, since = partition.kind, partition.holder, partition.held_since
    if kind == "unfilled":
        return f"{head}: {_filling(partition, minimum_age)}"
    if kind == "minimum age":
        assert since is not None  # the newest message's append time
        until = since + datetime.timedelta(seconds=minimum_age)
        return (
            f"{head}: kept for the minimum age ({minimum_age:g} s) until {time_text(until)}: its"
            f" newest message was appended {time_text(since)}"
        )
    if kind is None:
        return f"{head}: nothing holds it; it goes once the partitions before it have"
    when = "" if since is None else f" since {time_text(since)}"
    return f"{head}: held by {_WHAT.get(kind, kind)} {holder}{when}{_waiting(kind, holder)}"


def _filling(partition: PartitionHolder, minimum_age: float) -> str:
    """A partition that still takes positions: the one the next position falls in (it closes
    by age once its first message is older than the minimum age), or one made ahead."""
    p = partition.partition
    if partition.next_position < p.first_position:
        return "made ahead, empty"
    first = partition.first_appended_at
    filling = f"filling (the next position is {partition.next_position})"
    if first is None:
        return f"{filling}, empty"
    closes = first + datetime.timedelta(seconds=minimum_age)
    when = "at the next retention pass" if closes <= partition.now else f"at {time_text(closes)}"
    return (
        f"{filling}; it closes by age {when}, when its first message (appended"
        f" {time_text(first)}) is older than the minimum age ({minimum_age:g} s), and goes once"
        " passed"
    )


def archive_line(archived: ArchiveStatus) -> str:
    """Where a publication's archive stands, for `outbox status`."""
    if archived.archived_at is None:
        done = "nothing archived yet"
    else:
        done = (
            f"archived up to {readable(archived.archived_to)} (last range"
            f" {time_text(archived.archived_at)})"
        )
    behind = f"{archived.messages_behind} message(s) not archived yet"
    if archived.messages_behind:
        behind += f", the oldest appended {archived.oldest_behind_seconds:.0f} s ago"
    return f"archive of {archived.publication} at {archived.uri}: {done}; {behind}"
