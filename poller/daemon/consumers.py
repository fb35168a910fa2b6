"""The subscription's consumers at run time: each has a queue and `max_in_flight` slots.

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


class Consumer:
    def __init__(
        self,
        consumer: int,
        slots: int,
        deliver: Deliverer,
        on_crash: OnCrash,
        on_finished: Callable[[], None],
    ) -> None:
        self.consumer = consumer
        # A queue wakes one waiting slot per message; an Event would wake them all.
        self._queue: asyncio.Queue[Deliver] = asyncio.Queue()
        self._deliver = deliver
        self._on_crash = on_crash
        self._on_finished = on_finished
        # By delivery id: hashing the Deliver dataclass itself cost 5 % of a drain.
        self.delivering: dict[int, Deliver] = {}
        self._slots = [
            asyncio.create_task(self._slot(), name=f"consumer-{consumer}-slot-{n}")
            for n in range(slots)
        ]

    def push(self, command: Deliver) -> None:
        self._queue.put_nowait(command)

    async def _slot(self) -> None:
        while True:
            command = await self._queue.get()
            self.delivering[command.delivery_id] = command
            try:
                await self._deliver(command)
            except Exception:
                # Not the handler failing (that is data for the machine), a bug around it:
                # report the consumer dead so its deliveries are retried, and keep serving.
                log.exception("consumer %s crashed delivering %s", self.consumer, command)
                self._on_crash(self.consumer)
            finally:
                del self.delivering[command.delivery_id]
                self._on_finished()

    async def close(self) -> None:
        for slot in self._slots:
            slot.cancel()
        await asyncio.gather(*self._slots, return_exceptions=True)


class Consumers:
    def __init__(self, slots: int, deliver: Deliverer, on_crash: OnCrash) -> None:
        self._slots = slots
        self._deliver = deliver
        self._on_crash = on_crash
        self._consumers: dict[int, Consumer] = {}
        self._unfinished = 0  # deliveries pushed and not yet ended, on every consumer
        self._idle = asyncio.Event()
        self._idle.set()

    def push(self, command: Deliver) -> None:
        consumer = self._consumers.get(command.consumer)
        if consumer is None:
            consumer = Consumer(
                command.consumer, self._slots, self._deliver, self._on_crash, self._finished
            )
            self._consumers[command.consumer] = consumer
        self._unfinished += 1
        self._idle.clear()
        consumer.push(command)

    def _finished(self) -> None:
        self._unfinished -= 1
        if self._unfinished == 0:
            self._idle.set()

    async def wait_idle(self, timeout: float) -> bool:
        """Wait until every delivery pushed has ended; False if some still run after timeout."""
        try:
            await asyncio.wait_for(self._idle.wait(), timeout)
        except TimeoutError:
            return False
        return True

    def delivering(self) -> list[Deliver]:
        """Deliveries whose handlers have been called and not yet returned."""
        return [
            command
            for consumer in self._consumers.values()
            for command in consumer.delivering.values()
        ]

    async def close(self) -> None:
        await asyncio.gather(*(consumer.close() for consumer in self._consumers.values()))
