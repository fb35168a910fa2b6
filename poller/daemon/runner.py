"""`outbox poll`: several subscriptions in one process, stopped cleanly by SIGTERM or SIGINT."""

import asyncio
import contextlib
import logging
import signal
from collections.abc import Awaitable, Callable, Sequence

from prometheus_client.registry import Collector

from poller.daemon.coordinator import SubscriptionCoordinator
from poller.daemon.handlers import Handler
from poller.daemon.metrics import DaemonMetrics
from poller.daemon.metrics_server import MetricsServer
from poller.daemon.notify_listener import NotifyListener
from poller.daemon.options import DaemonOptions
from poller.daemon.retention import run_retention
from poller.message import Message

log = logging.getLogger(__name__)


async def run_daemon(
    database_url: str,
    subscriptions: list[str],
    handler: Handler,
    options: DaemonOptions,
    stop: asyncio.Event | None = None,
    collectors: Sequence[Collector] = (),
    closers: Sequence[Callable[[], Awaitable[None]]] = (),
) -> list[Message]:
    """Run until `stop` is set (or SIGTERM/SIGINT); return the messages whose handlers were
    still running when the shutdown timeout ran out (empty after a clean stop). Their threads
    cannot be stopped, so a command-line caller should end the process rather than wait.

    `collectors`: more Prometheus figures for /metrics (a relay's own). `closers`: awaited on
    the daemon's loop once every subscription stopped (a relay's broker connection, which
    belongs to this loop and must be closed before it ends).
    """
    stop = stop or asyncio.Event()
    metrics = DaemonMetrics(subscriptions, options)
    for collector in collectors:
        metrics.registry.register(collector)
    port = options.metrics_port  # the server starts first: a taken port fails alone
    server = None if port is None else MetricsServer.start(metrics, database_url, port)
    loop = asyncio.get_running_loop()
    for signal_number in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(signal_number, stop.set)
    notifications = NotifyListener()
    listener = asyncio.create_task(notifications.listen(database_url), name="listen")
    retention = asyncio.create_task(run_retention(database_url, options, stop), name="retention")
    # A caller (and thread pool) per shard of each subscription (see coordinator.py): one
    # subscription's slow handlers neither starve another's threads nor hold back its next
    # leadership term.
    coordinators = [
        SubscriptionCoordinator(
            database_url,
            name,
            handler if server is None else metrics[name].observed(handler),
            options,
            notifications,
            metrics[name],
        )
        for name in subscriptions
    ]
    try:
        await asyncio.gather(*(coordinator.run(stop) for coordinator in coordinators))
    finally:
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
