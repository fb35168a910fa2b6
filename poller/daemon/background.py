"""The daemon in a background thread of this process, for applications that embed it (and
for the demo, the benchmarks and the tests, which use exactly this)."""

import asyncio
import threading
from collections.abc import Awaitable, Callable, Sequence
from types import TracebackType

from poller.daemon.handlers import Handler
from poller.daemon.options import DaemonOptions
from poller.daemon.runner import run_daemon


class DaemonThread:
    """Runs `outbox poll` for `subscriptions` on its own event loop and thread.

    `stop()` ends it as SIGTERM would (handlers in flight finish, the final checkpoint is
    written) and re-raises whatever ended the daemon early, so a crash is never silent.
    Usable as a context manager.
    """

    def __init__(
        self,
        database_url: str,
        subscriptions: list[str],
        handler: Handler,
        options: DaemonOptions | None = None,
        closers: Sequence[Callable[[], Awaitable[None]]] = (),
    ) -> None:
        self._loop = asyncio.new_event_loop()
        self._stop = asyncio.Event()
        self._failure: BaseException | None = None
        daemon = run_daemon(
            database_url,
            subscriptions,
            handler,
            options or DaemonOptions(),
            self._stop,
            closers=closers,
        )

        def serve() -> None:
            try:
                self._loop.run_until_complete(daemon)
            except BaseException as error:  # handed to whoever calls stop()
                self._failure = error

        self._thread = threading.Thread(target=serve, name="outbox-daemon", daemon=True)

    def start(self) -> None:
        self._thread.start()

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def stop(self, timeout: float = 60) -> None:
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._stop.set)
            self._thread.join(timeout)
            if self._thread.is_alive():
                raise TimeoutError(f"the daemon did not stop within {timeout:g} s")
        if not self._loop.is_closed():
            self._loop.close()
        if self._failure is not None:
            raise self._failure

    def __enter__(self) -> "DaemonThread":
        self.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()
