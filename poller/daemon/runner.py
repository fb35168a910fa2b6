"""`outbox poll`: several subscriptions in one process, stopped cleanly by SIGTERM or SIGINT.

A stop is bounded whatever the database does. Handlers in flight get `shutdown_timeout`; the
last writes (final checkpoints, lease and membership releases) then get `_LAST_WRITES` more.
A database that refuses connections fails them at once, but one that does not answer at all
(a partition) would hold them, and the exit, for as long as TCP takes to give up: after that
the daemon cancels them (at most `_CANCELLING` more) and leaves. Nothing is lost: the next
leader resumes from the stored checkpoints once the leases run out. So a stop takes at most
`shutdown_timeout + STOP_ALLOWANCE` seconds, which a supervisor's grace period (Kubernetes'
terminationGracePeriodSeconds, systemd's TimeoutStopSec) should exceed.
"""

import asyncio
import contextlib
import functools
import logging
import signal
import threading
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from prometheus_client.registry import Collector

from poller.daemon.delivery.handler_calls import CallObserver
from poller.daemon.handlers import Handler, check_signature
from poller.daemon.options import DaemonOptions
from poller.daemon.process.coordinator import SubscriptionCoordinator
from poller.daemon.process.postgres_database import PostgresSubscriptionDatabase
from poller.daemon.process.retention import run_retention
from poller.daemon.process.subscription_connections import CONNECTIONS_PER_SUBSCRIPTION
from poller.daemon.reporting import tracing
from poller.daemon.reporting.metrics import DaemonMetrics
from poller.daemon.reporting.metrics_server import MetricsServer
from poller.daemon.term.notify_listener import NotifyListener
from poller.message import Message
from poller.printable import safe_repr
from poller.waits import cancel_until_done

log = logging.getLogger(__name__)

_LAST_WRITES = 2.0
_CANCELLING = 1.0
STOP_ALLOWANCE = _LAST_WRITES + _CANCELLING
"""Seconds a stop may take beyond `shutdown_timeout` (see the module's docstring)."""


async def run_daemon(
    database_url: str,
    subscriptions: list[str],
    handler: Handler,
    options: DaemonOptions,
    stop: asyncio.Event | None = None,
    collectors: Sequence[Collector] = (),
    closers: Sequence[Callable[[], Awaitable[None]]] = (),
    *,
    startup_checks: Callable[[threading.Event], None] | None = None,
) -> list[Message]:
    """Run until `stop` is set (or SIGTERM/SIGINT); return the messages whose handlers were
    still running when the shutdown timeout ran out (empty after a clean stop). Their threads
    cannot be stopped, so a command-line caller should end the process rather than wait.

    `collectors`: more Prometheus figures for /metrics (a relay's own). `closers`: awaited on
    the daemon's loop once every subscription stopped (a relay's broker connection, which
    belongs to this loop and must be closed before it ends). `startup_checks`: run on a
    thread of its own before any subscription starts, while the probes are served (alive, not
    ready) and a stop is honoured; it is given an event set at a stop, which its waits should
    honour. What it raises ends `run_daemon` (`outbox poll` waits there for the database's
    first connection and checks the subscriptions).
    """
    check_signature(handler, safe_repr(handler))  # as `outbox poll` does: not at each message
    stop = stop or asyncio.Event()
    metrics = DaemonMetrics(subscriptions, options)
    for collector in collectors:
        metrics.registry.register(collector)
    # The server starts first: a taken port fails alone, and a database that is down at start
    # shows as one (/healthz alive, /readyz not ready, outbox_database_up 0), not as a daemon
    # that is down, which a liveness probe would restart.
    port = options.metrics_port
    server = None if port is None else MetricsServer.start(metrics, database_url, port)
    loop = asyncio.get_running_loop()
    for signal_number in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(signal_number, _stop_on, signal_number, stop, options)
    started = False
    try:
        started = startup_checks is None or await _checked(startup_checks, stop)
    finally:
        if not started and server is not None:
            server.stop()
    if not started:
        log.info("poller stopped before its start checks were done")
        return []
    log.info(
        "connections to the database: at most %d (one to LISTEN, %d for each of %d"
        " subscriptions however many shards it leads, one while a retention pass runs)%s",
        2 + CONNECTIONS_PER_SUBSCRIPTION * len(subscriptions),
        CONNECTIONS_PER_SUBSCRIPTION,
        len(subscriptions),
        "" if port is None else ", and one for each /metrics scrape while it runs",
    )
    notifications = NotifyListener()
    listener = asyncio.create_task(notifications.listen(database_url), name="listen")
    retention = asyncio.create_task(run_retention(database_url, options, stop), name="retention")
    # Threads per subscription, a caller per shard (see coordinator.py): one subscription's
    # slow handlers neither starve another's threads nor hold back its next leadership term.
    coordinators = [
        SubscriptionCoordinator(
            functools.partial(
                PostgresSubscriptionDatabase,
                database_url,
                options.read_database_url,
                name,
                options=options,
            ),
            name,
            handler,
            options,
            notifications,
            metrics[name],
            _observers(name, metrics if server is not None else None),
        )
        for name in subscriptions
    ]
    work = asyncio.gather(*(coordinator.run(stop) for coordinator in coordinators))
    try:
        await _until_done_or_overdue(work, stop, options.shutdown_timeout)
    finally:
        work.cancel()  # run_daemon itself cancelled: the coordinators go with it
        listener.cancel()
        retention.cancel()
        await asyncio.gather(listener, retention, return_exceptions=True)
        for close in closers:
            try:
                await close()
            except Exception:  # a connection that will not close cleanly is gone anyway
                log.warning("closing after the daemon stopped failed", exc_info=True)
        if server is not None:
            server.stop()
    # Only what runs now: a call a shard move or an earlier term waited for has returned.
    unfinished = {m.at: m for coordinator in coordinators for m in coordinator.running()}
    log.info("poller stopped")
    return list(unfinished.values())


async def _checked(checks: Callable[[threading.Event], None], stop: asyncio.Event) -> bool:
    """Run `checks` on a daemon thread (a connection attempt to a server that does not answer
    waits minutes, and asyncio.run would wait for an executor's thread at exit); True once
    they passed, False if `stop` came first. Their error is raised here."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()
    # Retrieved whoever waits: an error that ends the checks after a stop is no one's news.
    done.add_done_callback(lambda future: future.cancelled() or future.exception())
    stopping = threading.Event()

    def settle(error: BaseException | None) -> None:
        if done.done():
            return
        if error is None:
            done.set_result(None)
        else:
            done.set_exception(error)

    def run() -> None:
        error = None
        try:
            checks(stopping)
        except BaseException as raised:  # handed to the loop
            error = raised
        with contextlib.suppress(RuntimeError):  # the loop closed: nobody waits any more
            loop.call_soon_threadsafe(settle, error)

    threading.Thread(target=run, name="outbox-start-checks", daemon=True).start()
    stopped = asyncio.ensure_future(stop.wait())
    either: set[asyncio.Future[Any]] = {done, stopped}
    try:
        await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopped.cancel()
    if done.done():
        done.result()
        return True
    stopping.set()
    # A wait ends at once; an attempt on a server that does not answer is left to its thread.
    await asyncio.wait({done}, timeout=_CANCELLING)
    return False


def _observers(subscription: str, metrics: DaemonMetrics | None) -> list[CallObserver]:
    """Who sees the subscription's handler calls besides its failure log: its metrics when
    they are served, and a span per call when this process traces (tracing.py)."""
    observers: list[CallObserver] = [] if metrics is None else [metrics[subscription]]
    spans = tracing.span_recorder(subscription)
    if spans is not None:
        observers.append(spans)
    return observers


async def _until_done_or_overdue(
    work: "asyncio.Future[list[None]]", stop: asyncio.Event, shutdown_timeout: float
) -> None:
    """Wait for the coordinators; once `stop` is set, for at most `shutdown_timeout` plus
    `_LAST_WRITES` seconds, then cancel what still waits for the database."""
    stopped = asyncio.ensure_future(stop.wait())
    either: set[asyncio.Future[Any]] = {work, stopped}
    try:
        await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopped.cancel()
    if not work.done():
        await asyncio.wait({work}, timeout=shutdown_timeout + _LAST_WRITES)
    if not work.done():
        log.warning(
            "stopping: the database did not answer within %g s of the stop; leaving without"
            " the last writes (final checkpoints, lease and membership releases): the next"
            " leaders resume from the stored checkpoints once the leases run out",
            shutdown_timeout + _LAST_WRITES,
        )
        if not await cancel_until_done(work, within=_CANCELLING):
            log.error("stopping: some of the daemon's tasks did not end when cancelled")
        elif not work.cancelled():
            work.exception()  # the cancellation it ended with: retrieved, so asyncio says nothing
        return
    work.result()  # a coordinator's own error, as before


def _stop_on(signal_number: signal.Signals, stop: asyncio.Event, options: DaemonOptions) -> None:
    if not stop.is_set():
        log.info(
            "%s: stopping; handlers in flight get %g s, the whole stop at most %g s",
            signal_number.name,
            options.shutdown_timeout,
            options.shutdown_timeout + STOP_ALLOWANCE,
        )
    stop.set()
