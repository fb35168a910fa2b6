"""One retention pass: partitions created ahead of need, retired once nobody needs them, the
filling one closed by age. The daemon runs it on a schedule (poller.daemon.process.retention)
and an operator by hand (`outbox prune`, through poller.operations).
"""

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import psycopg

from poller.store import retention_store
from poller.store.retention_store import ClosedByAge, MessagePartition, RetiredPartition

if TYPE_CHECKING:
    # Only its type: importing poller.daemon at run time would load the whole daemon, which
    # imports this module, into every operator front end.
    from poller.daemon.options import DaemonOptions


@dataclass(frozen=True)
class RetentionPass:
    created: list[str]
    retired: list[RetiredPartition]  # every partition tried, with its outcome
    ran: bool = True  # false: another process held the retention lock
    closed: ClosedByAge = field(default_factory=lambda: ClosedByAge(None))


def retention_pass(
    conn: psycopg.Connection[Any], options: "DaemonOptions", *, dry_run: bool = False
) -> RetentionPass:
    """Create the partitions due, retire the retirable ones, oldest first, then close the
    filling partition by age.

    A partition closes by age once its first message is older than the minimum age: the next
    position jumps to the first partition made ahead (and partitions are made ahead of the new
    next position as before), so a quiet publication's delivered messages go within about
    twice the minimum age instead of once 1M positions have been used. The closed partition is
    left to the next pass.

    `conn` must be in autocommit mode: the lock is a session lock, and each retirement commits
    on its own so that the parent table's lock is held only for that drop. A dry run changes
    nothing and reports what a real one would retire now.
    """
    if not retention_store.try_retention_lock(conn):
        return RetentionPass([], [], ran=False)
    try:
        candidates = retention_store.retirable_partitions(conn, options.retention_minimum_age)
        kept = _kept_for_damaged_archives(conn, candidates)
        if dry_run:
            return RetentionPass(
                [], [kept.get(p.name) or RetiredPartition(p, "would retire") for p in candidates]
            )
        created = _create(conn, options)
        retired = [kept.get(p.name) or _retire(conn, p, options) for p in candidates]
        closed = retention_store.close_partition_by_age(
            conn, options.retention_minimum_age, options.retention_lock_wait
        )
        if closed.partition is not None:
            created += _create(conn, options)  # ahead of the new next position
        return RetentionPass(created, retired, closed=closed)
    finally:
        retention_store.release_retention_lock(conn)


def _kept_for_damaged_archives(
    conn: psycopg.Connection[Any], candidates: list[MessagePartition]
) -> dict[str, RetiredPartition]:
    """The candidates that hold messages of an archive with a file missing or changed, kept:
    the database says those messages are archived, the files say they would be lost."""
    if not candidates:
        return {}
    damaged = retention_store.damaged_archives(conn)
    kept = {}
    for partition in candidates:
        for publication, problem in damaged.items():
            if retention_store.holds_publications(conn, partition, [publication]):
                kept[partition.name] = RetiredPartition(
                    partition, "archive damaged", f"the archive of {publication!r}: {problem}"
                )
                break
    return kept


def _create(conn: psycopg.Connection[Any], options: "DaemonOptions") -> list[str]:
    return retention_store.create_partitions(conn, options.partition_size, options.partitions_ahead)


def _retire(
    conn: psycopg.Connection[Any], partition: MessagePartition, options: "DaemonOptions"
) -> RetiredPartition:
    return retention_store.retire_partition(
        conn, partition, options.retention_minimum_age, options.retention_lock_wait
    )
