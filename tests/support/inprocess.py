"""A daemon running in a background thread of the test process, stopped like SIGTERM would."""

from collections.abc import Iterator
from contextlib import contextmanager

from poller.daemon.background import DaemonThread
from poller.daemon.handlers import Handler
from poller.daemon.options import DaemonOptions

FAST = DaemonOptions(lease_seconds=2.0, renew_every=0.2, standby_poll=0.1, shutdown_timeout=5.0)


@contextmanager
def running_daemon(
    database_url: str, subscriptions: list[str], handler: Handler, options: DaemonOptions = FAST
) -> Iterator[None]:
    with DaemonThread(database_url, subscriptions, handler, options):
        yield
