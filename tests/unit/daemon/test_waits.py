"""A reader waiting for NOTIFY stops when its term cancels it, however the cancellation meets
a wake-up. With `asyncio.wait_for` (Python 3.11) a cancellation arriving within two loop
iterations of the wake-up was lost: the reader read on and a graceful stop waited for ever."""

import asyncio

import pytest

from poller.daemon.term.notify_listener import NotifyListener
from poller.waits import wait_event


@pytest.mark.parametrize("iterations_after_wake", [0, 1, 2, 3])
async def test_a_reader_cancelled_as_it_is_woken_stops(iterations_after_wake: int) -> None:
    notifications = NotifyListener()
    waits = 0

    async def reader() -> None:
        nonlocal waits
        while True:  # as LeadershipTerm._read_loop: read, then wait for a wake-up
            await notifications.wait("orders", 5.0)
            waits += 1

    task = asyncio.create_task(reader())
    await asyncio.sleep(0)  # the reader waits now
    notifications.wake("orders")
    for _ in range(iterations_after_wake):
        await asyncio.sleep(0)
    task.cancel()
    for _ in range(10):  # the other shards' readers go on waking it
        await asyncio.sleep(0)
        notifications.wake("orders")
    done, _ = await asyncio.wait({task}, timeout=1.0)
    assert task in done, f"the reader ran on after its cancellation ({waits} wake-ups taken)"
    assert task.cancelled()


async def test_wait_event_says_whether_the_event_was_set() -> None:
    event = asyncio.Event()
    assert not await wait_event(event, 0.01)
    asyncio.get_running_loop().call_later(0.01, event.set)
    assert await wait_event(event, 5.0)
