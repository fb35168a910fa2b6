"""Waiting with a timeout without losing a cancellation, and giving up on what hangs.

Before Python 3.12, `asyncio.wait_for` returns normally when its task is cancelled in the
loop iterations between the awaited thing finishing and wait_for noticing: the cancellation
is lost. A shard's reader waits for NOTIFY this way, and in-process wake-ups set that event
often; a graceful stop cancelled the reader, the reader lost it and read on, and the stop
waited for it for ever (a SIGTERMed daemon that never exited, a shard that never moved).
`asyncio.timeout` keeps the cancellation; ruff bans `asyncio.wait_for` (pyproject.toml).
"""

import asyncio
from collections.abc import Awaitable
from typing import Any, TypeVar

T = TypeVar("T")

# Between two cancellations of work that does not end at the first (see cancel_until_done).
_CANCEL_AGAIN_AFTER = 0.05


class Stopped(Exception):  # noqa: N818 - an event the caller handles, not a bug
    """The stop was set before what was awaited finished; that was abandoned."""


async def wait_event(event: asyncio.Event, timeout: float) -> bool:
    """Wait until `event` is set or `timeout` seconds have passed; whether it is set."""
    try:
        async with asyncio.timeout(timeout):
            await event.wait()
    except TimeoutError:
        return False
    return True


async def unless_stopped(awaitable: Awaitable[T], stop: asyncio.Event) -> T:
    """`awaitable`'s result, or Stopped as soon as `stop` is set (a connection attempt to a
    server that does not answer waits 130 s before psycopg gives up; a stop must not)."""
    work = asyncio.ensure_future(awaitable)
    stopped = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({work, stopped}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopped.cancel()
        if not work.done():
            await cancel_until_done(work, within=None)
        if work.done() and not work.cancelled():
            # Retrieved even when this wait is itself cancelled: work that ended by raising
            # (a reconnect told to stop raises Stopped) would otherwise be logged at exit
            # as an exception never retrieved.
            work.exception()
    if work.cancelled():
        raise Stopped
    return work.result()


async def cancel_until_done(work: "asyncio.Future[Any]", within: float | None) -> bool:
    """Cancel `work`, again every 50 ms until it ends (at most `within` seconds); whether it
    did. psycopg answers a first cancellation of a running query by asking the server to
    cancel it and waiting up to 5 + 5 s for that, which a server that does not answer never
    does; a second cancellation ends the wait at once and closes the connection."""
    loop = asyncio.get_running_loop()
    deadline = None if within is None else loop.time() + within
    while not work.done() and (deadline is None or loop.time() < deadline):
        work.cancel()
        await asyncio.wait({work}, timeout=_CANCEL_AGAIN_AFTER)
    return work.done()
