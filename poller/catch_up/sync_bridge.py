"""The plain-iterator face of an async iterator: one source for `subscribe` and
`subscribe_sync`. The async iterator runs on a private event loop in its own thread; each
`next()` waits for its next item (`subscribe_sync` steps pages: one read's items), so nothing
is read ahead of the caller beyond it."""

import asyncio
import contextlib
import threading
from collections.abc import AsyncGenerator, Callable, Generator
from typing import Generic, TypeVar

Item = TypeVar("Item")


class _Finished:
    """Marks the end: StopAsyncIteration cannot travel through a concurrent future."""


class _Stepper(Generic[Item]):
    """Steps the async generator on the loop, remembering the step in progress so that closing
    can stop it first (an async generator cannot be closed while it runs)."""

    def __init__(self, iterator: AsyncGenerator[Item]) -> None:
        self._iterator = iterator
        self._step: asyncio.Task[Item] | None = None

    async def next_item(self) -> Item | _Finished:
        self._step = asyncio.ensure_future(anext(self._iterator))
        try:
            return await self._step
        except StopAsyncIteration:
            return _Finished()

    async def close(self) -> None:
        if self._step is not None and not self._step.done():
            self._step.cancel()
            with contextlib.suppress(BaseException):
                await self._step
        await self._iterator.aclose()


def iterate_in_thread(make_iterator: Callable[[], AsyncGenerator[Item]]) -> Generator[Item]:
    loop = asyncio.new_event_loop()
    # daemon: a caller that drops the iterator without closing it must not hang the exit.
    thread = threading.Thread(target=loop.run_forever, name="outbox-subscribe", daemon=True)
    thread.start()
    stepper = _Stepper(make_iterator())
    try:
        while True:
            item = asyncio.run_coroutine_threadsafe(stepper.next_item(), loop).result()
            if isinstance(item, _Finished):
                return
            yield item
    finally:
        # Also after Ctrl-C in the caller's thread while a step was still waiting.
        asyncio.run_coroutine_threadsafe(stepper.close(), loop).result()
        loop.call_soon_threadsafe(loop.stop)
        thread.join()
        loop.close()
