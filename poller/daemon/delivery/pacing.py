"""A budget of delivery work per event loop iteration, so no setting can starve the loop.

Every run's end costs the loop work in proportion to its deliveries (outcomes to the machine,
what a failure withdraws, their redelivery). Handlers that fail at once, 1,024 consumers x
10,000 slots or an async handler that never awaits end runs faster than the loop can take
them: thousands of run ends queued for one iteration held lease renewals, SIGTERM and
/healthz for seconds each. `turn` lets up to `budget` of that work through per iteration;
the rest waits, in arrival order, for later iterations, with the loop's I/O polled between.
"""

import asyncio
import collections


class Pacer:
    def __init__(self, budget: int) -> None:
        self._budget = budget
        self._left = budget
        self._waiting: collections.deque[tuple[int, asyncio.Future[None]]] = collections.deque()
        self._refill_pending = False

    async def turn(self, cost: int) -> None:
        """Go on at once while this iteration's budget lasts; else wait for a later one."""
        if self._left > 0 and not self._waiting:
            self._left -= cost
            self._refill_soon()
            return
        future = asyncio.get_running_loop().create_future()
        self._waiting.append((cost, future))
        self._refill_soon()
        await future

    def _refill_soon(self) -> None:
        # call_soon from inside an iteration runs in the next one, after its I/O poll.
        if not self._refill_pending:
            self._refill_pending = True
            asyncio.get_running_loop().call_soon(self._refill)

    def _refill(self) -> None:
        self._refill_pending = False
        self._left = self._budget
        waiting = self._waiting
        while waiting and self._left > 0:
            cost, future = waiting.popleft()
            if not future.done():  # cancelled with its slot
                self._left -= cost
                future.set_result(None)
        if waiting:
            self._refill_soon()


class Turns:
    """A first-come, first-served limit on things running at once.

    asyncio.Semaphore takes a cancelled waiter out of its queue by search: cancelling the
    100,000 runs waiting for a thread at the end of a term took minutes. Here a cancelled
    waiter stays queued and is skipped when its turn comes.
    """

    def __init__(self, limit: int) -> None:
        self._free = limit
        self._waiting: collections.deque[asyncio.Future[None]] = collections.deque()

    async def take(self) -> None:
        if self._free > 0 and not self._waiting:
            self._free -= 1
            return
        future = asyncio.get_running_loop().create_future()
        self._waiting.append(future)
        try:
            await future
        except asyncio.CancelledError:
            if future.done() and not future.cancelled():
                self.give_back()  # given the turn just as it was cancelled: pass it on
            raise

    def give_back(self) -> None:
        waiting = self._waiting
        while waiting:
            future = waiting.popleft()
            if not future.done():
                future.set_result(None)
                return
        self._free += 1
