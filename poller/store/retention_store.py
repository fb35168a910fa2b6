"""Retention's statements: partitions created ahead, retired, and what holds them back.

The work itself is done by SQL functions that run as the schema owner (migration 0006), so a
role that owns no table may call these. Each call is its own transaction: retiring a partition
holds a lock on outbox.messages until commit, which must come at once.
"""

import datetime
from dataclasses import dataclass
from typing import Any

import psycopg

from outbox.archive import catalog as archive_catalog
from outbox.archive.errors import ArchiveError
from outbox.queries import QUERIES


@dataclass(frozen=True)
class MessagePartition:
    name: str
    first_position: int
    end_position: int  # exclusive
    messages: int


@dataclass(frozen=True)
class RetentionHolder:
    """What keeps one partition: kind is subscription, spark, consumer or parked."""

    partition: str
    first_position: int
    end_position: int
    kind: str
    holder: str | None
    held_since: datetime.datetime | None
    held_for_seconds: float | None


@dataclass(frozen=True)
class PartitionHolder:
    """One partition and what keeps it now, under a minimum age (a dry run's view)."""

    partition: MessagePartition
    first_appended_at: datetime.datetime | None
    """When its first message (by position) was appended: it closes by age from there."""
    next_position: int
    """The position handed out next, database-wide."""
    now: datetime.datetime
    """The database's clock when this was read."""
    kind: str | None
    """unfilled, subscription, spark, consumer, parked or minimum age; None: nothing."""
    holder: str | None
    held_since: datetime.datetime | None


@dataclass(frozen=True)
class RetiredPartition:
    partition: MessagePartition
    outcome: str
    """retired, held (something holds it now), busy (the lock wait ran out), would retire (a
    dry run), or archive damaged (it holds messages of an archive with a file missing or
    changed, `problem`)."""
    problem: str | None = None


def create_partitions(
    conn: psycopg.Connection[Any], partition_size: int, partitions_ahead: int
) -> list[str]:
    with conn.transaction():
        rows = conn.execute(
            QUERIES["create_message_partitions"],
            {"partition_size": partition_size, "partitions_ahead": partitions_ahead},
        ).fetchall()
    return [name for (name,) in rows]


def retirable_partitions(
    conn: psycopg.Connection[Any], minimum_age_seconds: float
) -> list[MessagePartition]:
    with conn.transaction():
        rows = conn.execute(
            QUERIES["retirable_message_partitions"], {"minimum_age_seconds": minimum_age_seconds}
        ).fetchall()
    return [MessagePartition(*row) for row in rows]


def retire_partition(
    conn: psycopg.Connection[Any],
    partition: MessagePartition,
    minimum_age_seconds: float,
    lock_wait_seconds: float,
) -> RetiredPartition:
    """Drop it if it may still go; the message count is the one under the drop's locks."""
    try:
        with conn.transaction():
            row = conn.execute(
                QUERIES["retire_message_partition"],
                {
                    "partition": partition.name,
                    "minimum_age_seconds": minimum_age_seconds,
                    "lock_wait_seconds": lock_wait_seconds,
                },
            ).fetchone()
    except psycopg.errors.LockNotAvailable:
        return RetiredPartition(partition, "busy")
    messages = None if row is None else row[0]
    if messages is None:
        return RetiredPartition(partition, "held")
    retired = MessagePartition(
        partition.name, partition.first_position, partition.end_position, messages
    )
    return RetiredPartition(retired, "retired")


@dataclass(frozen=True)
class ClosedByAge:
    """What closing the filling partition by age did."""

    partition: str | None
    """The partition closed now (new messages go to the next one); None when none was."""
    busy: bool = False
    """The writers' lock was not granted within the lock wait: the next pass tries again."""


def close_partition_by_age(
    conn: psycopg.Connection[Any], minimum_age_seconds: float, lock_wait_seconds: float
) -> ClosedByAge:
    """Close the partition taking the next position if its first message is older than the
    minimum age, so it is retired once passed (outbox.close_message_partition_by_age)."""
    try:
        with conn.transaction():
            row = conn.execute(
                QUERIES["close_message_partition_by_age"],
                {
                    "minimum_age_seconds": minimum_age_seconds,
                    "lock_wait_seconds": lock_wait_seconds,
                },
            ).fetchone()
    except psycopg.errors.LockNotAvailable:
        return ClosedByAge(None, busy=True)
    return ClosedByAge(None if row is None else row[0])


def partition_holders(
    conn: psycopg.Connection[Any], minimum_age_seconds: float
) -> list[PartitionHolder]:
    with conn.transaction():
        rows = conn.execute(
            QUERIES["partition_holders"], {"minimum_age_seconds": minimum_age_seconds}
        ).fetchall()
    return [
        PartitionHolder(MessagePartition(name, first, end, messages), *rest)
        for name, first, end, messages, *rest in rows
    ]


def retention_holders(conn: psycopg.Connection[Any]) -> list[RetentionHolder]:
    with conn.transaction():
        rows = conn.execute(QUERIES["retention_holders"]).fetchall()
    return [RetentionHolder(*row) for row in rows]


def try_retention_lock(conn: psycopg.Connection[Any]) -> bool:
    """A session lock: the caller must keep this connection for as long as it runs retention."""
    row = conn.execute(QUERIES["try_retention_lock"]).fetchone()
    return bool(row and row[0])


def release_retention_lock(conn: psycopg.Connection[Any]) -> None:
    conn.execute(QUERIES["release_retention_lock"])


def damaged_archives(conn: psycopg.Connection[Any]) -> dict[str, str]:
    """Per archived publication whose archive misses a file, or holds one of another size,
    among the ranges whose messages are still in the table: what is wrong. Retention keeps
    those messages: dropping them would leave them nowhere. A look at each file (no read),
    through pyarrow (the `archive` extra); without it every such archive counts as damaged,
    since its files cannot be looked at."""
    ranges = archive_catalog.ranges_in_table(conn)
    if not ranges:
        return {}
    try:
        from outbox.archive.files import problem_with
    except ModuleNotFoundError as error:
        problem = (
            "its files cannot be checked without pyarrow: pip install"
            f" 'outbox-poller[archive]' ({error})"
        )
        return {archived.publication: problem for archived in ranges}
    damaged: dict[str, str] = {}
    for archived in ranges:
        if archived.publication in damaged:
            continue
        for file in archived.files:
            try:
                found = problem_with(archived.uri, file)
            except ArchiveError as error:
                found = str(error)
            if found is not None:
                damaged[archived.publication] = found
                break
    return damaged


def holds_publications(
    conn: psycopg.Connection[Any], partition: MessagePartition, publications: list[str]
) -> bool:
    row = conn.execute(
        QUERIES["partition_holds_publications"],
        {
            "first_position": partition.first_position,
            "end_position": partition.end_position,
            "publications": publications,
        },
    ).fetchone()
    return bool(row and row[0])
