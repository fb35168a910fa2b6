"""Retention on a schedule: partitions created ahead of need, retired once nobody needs them.

One daemon of a database does it at a time, under a session advisory lock held for the run;
the others find it taken and skip their turn. The pass itself is poller.retention's, which
`outbox prune` runs by hand.
"""

import asyncio
import concurrent.futures
import logging
import threading
from collections.abc import Callable
from typing import TypeVar

import psycopg

from poller.daemon.options import DaemonOptions
from poller.retention import RetentionPass, retention_pass
from poller.waits import wait_event

log = logging.getLogger(__name__)

T = TypeVar("T")


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
