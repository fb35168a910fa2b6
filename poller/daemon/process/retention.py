"""Retention on a schedule: partitions created ahead of need, retired once nobody needs them.

One daemon of a database does it at a time, under a session advisory lock held for the run;
the others find it taken and skip their turn. `outbox prune` runs the same pass by hand.
"""

import asyncio
import concurrent.futures
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import psycopg

from poller.daemon.options import DaemonOptions
from poller.store import retention_store
from poller.store.retention_store import ClosedByAge, MessagePartition, RetiredPartition
from poller.waits import wait_event

log = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass(frozen=True)
class RetentionPass:
    created: list[str]
    retired: list[RetiredPartition]  # every partition tried, with its outcome
    ran: bool = True  # false: another process held the retention lock
    closed: ClosedByAge = field(default_factory=lambda: ClosedByAge(None))


def retention_pass(
    conn: psycopg.Connection[Any], options: DaemonOptions, *, dry_run: bool = False
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


def _create(conn: psycopg.Connection[Any], options: DaemonOptions) -> list[str]:
    return retention_store.create_partitions(conn, options.partition_size, options.partitions_ahead)


def _retire(
    conn: psycopg.Connection[Any], partition: MessagePartition, options: DaemonOptions
) -> RetiredPartition:
    return retention_store.retire_partition(
        conn, partition, options.retention_minimum_age, options.retention_lock_wait
    )


async def run_retention(database_url: str, options: DaemonOptions, stop: asyncio.Event) -> None:
    """Every retention_interval until `stop`: a failed pass is logged and tried again at the
    next interval, never the end of the daemon (retention can always wait)."""
    while not stop.is_set():
        try:
            done = await _in_daemon_thread(lambda: _pass_on_new_connection(database_url, options))
        except (psycopg.Error, OSError) as error:
            log.warning(
                "retention pass failed, next try in %g s: %s", options.retention_interval, error
            )
        else:
            _log_pass(done)
        await wait_event(stop, options.retention_interval)


async def _in_daemon_thread(work: Callable[[], T]) -> T:
    """`work()` on a thread of its own that the interpreter does not wait for at exit. Not
    `asyncio.to_thread`: `asyncio.run` waits for the default executor's threads, so a pass
    waiting on a database that does not answer (a partition: two minutes to give up
    connecting, for ever for a query) held the exit of a stopped daemon."""
    outcome: concurrent.futures.Future[T] = concurrent.futures.Future()

    def run() -> None:
        if outcome.set_running_or_notify_cancel():
            try:
                outcome.set_result(work())
            except BaseException as error:  # handed to the awaiting task
                outcome.set_exception(error)

    threading.Thread(target=run, name="outbox-retention", daemon=True).start()
    return await asyncio.wrap_future(outcome)


def _pass_on_new_connection(database_url: str, options: DaemonOptions) -> RetentionPass:
    with psycopg.connect(
        database_url, autocommit=True, application_name="outbox retention"
    ) as conn:
        return retention_pass(conn, options)


def _log_pass(done: RetentionPass) -> None:
    if not done.ran:
        log.debug("retention: another process runs it now")
        return
    if done.closed.partition is not None:
        log.info(
            "retention: closed partition %s by age: its first message is older than the"
            " minimum age, so new messages go to the next partition and it is retired once"
            " passed",
            done.closed.partition,
        )
    if done.closed.busy:
        log.info("retention: closing the filling partition by age waited too long for writers")
    for name in done.created:
        log.info("retention: created partition %s", name)
    for attempt in done.retired:
        partition = attempt.partition
        if attempt.problem is not None:
            log.error(
                "retention: kept partition %s: %s; restore the file from a backup (or delete the"
                " archive to archive anew)",
                partition.name,
                attempt.problem,
            )
            continue
        log.info(
            "retention: %s partition %s (positions %d to %d, %d messages)",
            attempt.outcome,
            partition.name,
            partition.first_position,
            partition.end_position - 1,
            partition.messages,
        )
