"""The event loop's pacing: a budget of run ends per iteration, and a first-come limit on
runs handed to the handler threads."""

import asyncio
import time

import pytest

from poller.daemon.delivery.pacing import Pacer, Turns


async def test_run_ends_past_the_budget_wait_for_later_iterations_in_arrival_order() -> None:
    loop = asyncio.get_running_loop()
    iteration = 0

    def count() -> None:
        nonlocal iteration
        iteration += 1
        loop.call_soon(count)

    loop.call_soon(count)
    pacer = Pacer(4)
    admitted: list[tuple[int, int]] = []

    async def end(n: int) -> None:
        await pacer.turn(1)
        admitted.append((n, iteration))

    await asyncio.gather(*(end(n) for n in range(20)))
    assert [n for n, _ in admitted] == list(range(20))
    per_iteration: dict[int, int] = {}
    for _, at in admitted:
        per_iteration[at] = per_iteration.get(at, 0) + 1
    assert max(per_iteration.values()) <= 8  # the budget, twice at most (see pacing.py)
    assert len(per_iteration) >= 3


async def test_a_turn_waits_for_one_given_back_and_cancelled_waiters_are_skipped() -> None:
    turns = Turns(1)
    await turns.take()
    cancelled = [asyncio.ensure_future(turns.take()) for _ in range(30_000)]
    waiting = asyncio.ensure_future(turns.take())
    await asyncio.sleep(0)
    started = time.monotonic()
    for future in reversed(cancelled):  # the last queued first: the worst order for a search
        future.cancel()
    await asyncio.gather(*cancelled, return_exceptions=True)
    # asyncio.Semaphore searches its queue for each: 4.5 s here, quadratic in the waiters.
    assert time.monotonic() - started < 2
    assert not waiting.done()
    turns.give_back()
    await asyncio.wait_for(waiting, 5)
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(turns.take(), 0.05)
