"""Consumers as lanes: each consumer index has a queue and `max_in_flight` slots awaiting it.

A slot awaits the handler directly instead of spawning a task per message, so a handler that
does not suspend costs no event-loop round trip; the state machine already bounds what each
consumer holds, so a slot never waits while its consumer has work queued.
"""

import asyncio
import logging
from collections.abc import Awaitable, Callable

from poller.subscription import Deliver

log = logging.getLogger(__name__)

Deliverer = Callable[[Deliver], Awaitable[None]]
OnCrash = Callable[[int], None]


class Lane:
    def __init__(self, consumer: int, slots: int, deliver: Deliverer, on_crash: OnCrash) -> None:
        self.consumer = consumer
        # A queue wakes one waiting slot per message; an Event would wake them all.
        self._queue: asyncio.Queue[Deliver] = asyncio.Queue()
        self._deliver = deliver
        self._on_crash = on_crash
        self.busy = 0
        self._slots = [
            asyncio.create_task(self._slot(), name=f"consumer-{consumer}-slot-{n}")
            for n in range(slots)
        ]

    def push(self, command: Deliver) -> None:
        self._queue.put_nowait(command)

    @property
    def idle(self) -> bool:
        return self._queue.empty() and self.busy == 0

    async def _slot(self) -> None:
        while True:
            command = await self._queue.get()
            self.busy += 1
            try:
                await self._deliver(command)
            except Exception:
                # Not the handler failing (that is data for the machine), a bug around it:
                # report the consumer dead so its deliveries are retried, and keep serving.
                log.exception("consumer %s crashed delivering %s", self.consumer, command)
                self._on_crash(self.consumer)
            finally:
                self.busy -= 1

    async def close(self) -> None:
        for slot in self._slots:
            slot.cancel()
        await asyncio.gather(*self._slots, return_exceptions=True)


class Lanes:
    def __init__(self, slots: int, deliver: Deliverer, on_crash: OnCrash) -> None:
        self._slots = slots
        self._deliver = deliver
        self._on_crash = on_crash
        self._lanes: dict[int, Lane] = {}

    def push(self, command: Deliver) -> None:
        lane = self._lanes.get(command.consumer)
        if lane is None:
            lane = Lane(command.consumer, self._slots, self._deliver, self._on_crash)
            self._lanes[command.consumer] = lane
        lane.push(command)

    @property
    def idle(self) -> bool:
        return all(lane.idle for lane in self._lanes.values())

    async def wait_idle(self, timeout: float) -> bool:
        deadline = asyncio.get_running_loop().time() + timeout
        while not self.idle:
            if asyncio.get_running_loop().time() >= deadline:
                return False
            await asyncio.sleep(0.01)
        return True

    async def close(self) -> None:
        await asyncio.gather(*(lane.close() for lane in self._lanes.values()))
