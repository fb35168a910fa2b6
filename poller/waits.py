"""Waiting with a timeout without losing a cancellation.

Before Python 3.12, `asyncio.wait_for` returns normally when its task is cancelled in the
loop iterations between the awaited thing finishing and wait_for noticing: the cancellation
is lost. A shard's reader waits for NOTIFY this way, and in-process wake-ups set that event
often; a graceful stop cancelled the reader, the reader lost it and read on, and the stop
waited for it for ever (a SIGTERMed daemon that never exited, a shard that never moved).
`asyncio.timeout` keeps the cancellation; ruff bans `asyncio.wait_for` (pyproject.toml).
"""

import asyncio


async def wait_event(event: asyncio.Event, timeout: float) -> bool:
    """Wait until `event` is set or `timeout` seconds have passed; whether it is set."""
    try:
        async with asyncio.timeout(timeout):
            await event.wait()
    except TimeoutError:
        return False
    return True
