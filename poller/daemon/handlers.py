"""Loading `package.module:callable` handlers and calling them, sync or async alike."""

import asyncio
import importlib
import inspect
import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from poller.message import Message

Handler = Callable[[Message], Any]


class HandlerNotFoundError(ValueError):
    """The --handler value does not name an importable callable."""


class DeliverySuperseded(Exception):  # noqa: N818 - an event the session handles, not a bug
    """The delivery no longer counted when its handler was due to start (a seek): not called."""


def load_handler(spec: str) -> Handler:
    module_name, separator, attribute = spec.partition(":")
    if not separator or not module_name or not attribute:
        raise HandlerNotFoundError(f"handler {spec!r} is not of the form package.module:callable")
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise HandlerNotFoundError(
            f"handler {spec!r}: cannot import {module_name!r}: {error}"
        ) from error
    target: Any = module
    for part in attribute.split("."):
        target = getattr(target, part, None)
        if target is None:
            raise HandlerNotFoundError(f"handler {spec!r}: {module_name!r} has no {attribute!r}")
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
        self._running = 0
        self._running_lock = threading.Lock()

    async def __call__(self, message: Message, wanted: Callable[[], bool] | None = None) -> None:
        """`wanted()` is asked right before the handler starts, on its thread: a delivery that
        waited for a free thread may have been sought away meanwhile."""
        if self._pool is None:
            result = _call_if_wanted(self._handler, message, wanted)
        else:
            loop = asyncio.get_running_loop()
            result = await loop.run_in_executor(self._pool, self._counted, message, wanted)
        if inspect.isawaitable(result):
            await _awaited(result)

    def _counted(self, message: Message, wanted: Callable[[], bool] | None) -> Any:
        with self._running_lock:
            self._running += 1
        try:
            return _call_if_wanted(self._handler, message, wanted)
        finally:
            with self._running_lock:
                self._running -= 1

    async def wait_quiet(self, timeout: float) -> bool:
        """Wait until no handler thread runs; False if some still do after `timeout`."""
        deadline = asyncio.get_running_loop().time() + timeout
        while self._running:
            if asyncio.get_running_loop().time() >= deadline:
                return False
            await asyncio.sleep(0.01)
        return True

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)


def _call_if_wanted(handler: Handler, message: Message, wanted: Callable[[], bool] | None) -> Any:
    if wanted is not None and not wanted():
        raise DeliverySuperseded(message)
    return handler(message)


async def _awaited(result: Awaitable[Any]) -> None:
    await result
