"""The daemon, for an application that embeds it (and for `outbox poll`, which runs it the
same way): `DaemonThread` on a thread of its own, `run_daemon` on the caller's event loop,
`DaemonOptions` for how it behaves, `load_handler` for a handler named package.module:callable,
and the process-wide settings a process whose main job is the daemon may take (its log
context, its garbage collector). Everything else under poller.daemon is its internals.
"""

from poller.daemon.background import DaemonThread
from poller.daemon.garbage_collection import set_for_daemon
from poller.daemon.handlers import (
    Handler,
    HandlerNotFoundError,
    HandlerSignatureError,
    PackageShadowedError,
    load_handler,
)
from poller.daemon.log_context import LogContextFilter
from poller.daemon.options import DaemonOptions
from poller.daemon.runner import run_daemon

__all__ = [
    "DaemonOptions",
    "DaemonThread",
    "Handler",
    "HandlerNotFoundError",
    "HandlerSignatureError",
    "LogContextFilter",
    "PackageShadowedError",
    "load_handler",
    "run_daemon",
    "set_for_daemon",
]
