"""Loading `package.module:callable` handlers and calling them, sync or async alike."""

import asyncio
import inspect
import pkgutil
import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from poller.message import Message

Handler = Callable[[Message], Any]


class HandlerNotFoundError(ValueError):
    """The --handler value does not name an importable callable."""


class HandlerExited(Exception):  # noqa: N818 - names what the handler did
    """The handler called sys.exit(): a failed delivery, never the end of the daemon."""

    def __init__(self, code: object) -> None:
        super().__init__(f"the handler called sys.exit({code!r})")


class DeliverySuperseded(Exception):  # noqa: N818 - an event the session handles, not a bug
    """The delivery no longer counted when its handler was due to start (a seek): not called."""


def load_handler(spec: str) -> Handler:
    """Import `package.module:callable` (the form `python -m` tools such as uvicorn take)."""
    module_name, separator, attribute = spec.partition(":")
    if not separator or not module_name or not attribute:
        raise HandlerNotFoundError(f"handler {spec!r} is not of the form package.module:callable")
    try:
        target = pkgutil.resolve_name(spec)
    except ImportError as error:
        raise HandlerNotFoundError(
            f"handler {spec!r}: cannot import {module_name!r}: {error}"
        ) from None
    except AttributeError:
        raise HandlerNotFoundError(
            f"handler {spec!r}: {module_name!r} has no {attribute!r}"
        ) from None
    except ValueError:  # not a dotted name: a path, spaces, an empty part
        raise HandlerNotFoundError(
            f"handler {spec!r} is not of the form package.module:callable"
        ) from None
    if not callable(target):
        raise HandlerNotFoundError(f"handler {spec!r} is a {type(target).__name__}, not callable")
    handler: Handler = target
    return handler


class HandlerCaller:
    """Runs async handlers on the loop and sync ones on a thread pool, so a blocking handler
    never stalls reading, leases or checkpoints."""

    def __init__(self, handler: Handler, threads: int) -> None:
        self._handler = handler
        self._is_async = inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(
            getattr(handler, "__call__", None)  # noqa: B004 - callable objects with async __call__
        )
        self._pool = None if self._is_async else ThreadPoolExecutor(threads, "outbox-handler")
        # Handlers running on threads outlive a cancelled term; a new term waits for them so a
        # key is never handled twice at once within this process.
        self._running: dict[int, Message] = {}  # by thread id
        self._running_lock = threading.Lock()
        self._quiet = asyncio.Event()  # set (from the last thread to finish) when none runs

    async def __call__(self, message: Message, wanted: Callable[[], bool] | None = None) -> None:
        """`wanted()` is asked right before the handler starts, on its thread: a delivery that
        waited for a free thread may have been sought away meanwhile."""
        if self._pool is None:
            result = _call_if_wanted(self._handler, message, wanted)
        else:
            loop = asyncio.get_running_loop()
            result = await loop.run_in_executor(self._pool, self._counted, loop, message, wanted)
        if inspect.isawaitable(result):
            try:
                await _awaited(result)
            except SystemExit as exit_request:
                raise HandlerExited(exit_request.code) from None

    def _counted(
        self,
        loop: asyncio.AbstractEventLoop,
        message: Message,
        wanted: Callable[[], bool] | None,
    ) -> Any:
        thread = threading.get_ident()
        with self._running_lock:
            self._running[thread] = message
        try:
            return _call_if_wanted(self._handler, message, wanted)
        finally:
            with self._running_lock:
                del self._running[thread]
                quiet = not self._running
            if quiet:
                loop.call_soon_threadsafe(self._quiet.set)

    def running(self) -> list[Message]:
        """The messages whose handlers run on a thread right now."""
        with self._running_lock:
            return list(self._running.values())

    async def wait_quiet(self, timeout: float) -> bool:
        """Wait until no handler thread runs; False if some still do after `timeout`."""
        with self._running_lock:
            if not self._running:
                return True
            # A thread that ends after this line schedules set() behind this coroutine's step.
            self._quiet.clear()
        try:
            await asyncio.wait_for(self._quiet.wait(), timeout)
        except TimeoutError:
            return False
        return True

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)


def _call_if_wanted(handler: Handler, message: Message, wanted: Callable[[], bool] | None) -> Any:
    if wanted is not None and not wanted():
        raise DeliverySuperseded(message)
    try:
        return handler(message)
    except SystemExit as exit_request:
        raise HandlerExited(exit_request.code) from None


async def _awaited(result: Awaitable[Any]) -> None:
    await result
