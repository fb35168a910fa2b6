"""`outbox poll`: several subscriptions in one process, stopped cleanly by SIGTERM or SIGINT."""

import asyncio
import contextlib
import logging
import signal

from poller.daemon.handlers import Handler, HandlerCaller
from poller.daemon.options import DaemonOptions
from poller.daemon.waker import Waker
from poller.daemon.worker import SubscriptionWorker

log = logging.getLogger(__name__)


async def run_daemon(
    database_url: str,
    subscriptions: list[str],
    handler: Handler,
    options: DaemonOptions,
    stop: asyncio.Event | None = None,
) -> None:
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for signal_number in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(signal_number, stop.set)
    waker = Waker()
    listener = asyncio.create_task(waker.listen(database_url), name="listen")
    # A caller (and thread pool) per subscription: one subscription's slow handlers neither
    # starve another's threads nor hold back its next leadership term.
    callers = [HandlerCaller(handler, options.handler_threads) for _ in subscriptions]
    workers = [
        SubscriptionWorker(database_url, name, caller, options, waker)
        for name, caller in zip(subscriptions, callers, strict=True)
    ]
    try:
        await asyncio.gather(*(worker.run(stop) for worker in workers))
    finally:
        listener.cancel()
        await asyncio.gather(listener, return_exceptions=True)
        for caller in callers:
            caller.close()
    log.info("poller stopped")
