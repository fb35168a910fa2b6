"""A daemon running in a background thread of the test process, stopped like SIGTERM would."""

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from poller.daemon.handlers import Handler
from poller.daemon.options import DaemonOptions
from poller.daemon.runner import run_daemon

FAST = DaemonOptions(lease_seconds=2.0, renew_every=0.2, standby_poll=0.1, shutdown_timeout=5.0)


@contextmanager
def running_daemon(
    database_url: str, subscriptions: list[str], handler: Handler, options: DaemonOptions = FAST
) -> Iterator[None]:
    loop = asyncio.new_event_loop()
    stop = asyncio.Event()
    failure: list[BaseException] = []

    def serve() -> None:
        try:
            loop.run_until_complete(run_daemon(database_url, subscriptions, handler, options, stop))
        except BaseException as error:  # surfaced to the test below
            failure.append(error)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(timeout=30)
        loop.close()
    assert not thread.is_alive(), "the daemon did not stop within 30 s"
    if failure:
        raise failure[0]
