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
    caller = HandlerCaller(handler, options.handler_threads)
    workers = [
        SubscriptionWorker(database_url, name, caller, options, waker) for name in subscriptions
    ]
    try:
        await asyncio.gather(*(worker.run(stop) for worker in workers))
    finally:
        listener.cancel()
        await asyncio.gather(listener, return_exceptions=True)
        caller.close()
    log.info("poller stopped")
