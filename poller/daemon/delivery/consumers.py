"""The subscription's consumers at run time: each has a queue and `max_in_flight` slots,
started as its queue needs them.

A slot takes what its consumer has queued, up to `prefetch` deliveries, as one run (see
runs.py), goes through it in one hop and reports every outcome in one call; the state machine
bounds what each consumer holds, so a slot never waits while its consumer has work queued.

Order: a slot runs its deliveries in the order the machine gave them, and a run stops at the
first delivery that did not succeed. What followed it, in the run and in the queue, is handed
back unstarted (withdrawn), so nothing runs ahead of the failed message's retry. A slot whose
handler the machine says overran its timeout is stuck until the call returns: what waits
behind it is handed back the same way, and the machine counts the slot busy meanwhile.
"""

import asyncio
import collections
import logging
import time
from collections.abc import Awaitable, Callable

from poller.daemon.delivery.pacing import Pacer
from poller.daemon.delivery.runs import Run, withdrawn
from poller.reconnect import LONGEST_DELAY, Backoff
from poller.subscription import Deliver, Outcome
from poller.waits import wait_event

log = logging.getLogger(__name__)

RUN_END_BUDGET = 2048
"""Deliveries of ended runs taken per loop iteration (see pacing.py): a few ms of work."""

Execute = Callable[[Run], Awaitable[None]]
"""Goes through a run, recording each started delivery's outcome in it."""
Report = Callable[[list[Outcome]], None]
Overran = Callable[[int], bool]
"""Whether the machine failed this delivery at its deadline while its handler runs on."""

FIRST_CRASH_PAUSE = 0.1
"""A slot that crashed pauses before its next run, under the reconnect policy's backoff
(poller/reconnect.py: doubling up to 5 s, with its jitter), reset by a run that does not
crash: a bug around the handler that fails at once on every run once spun the event loop at
100% CPU, deaf to SIGTERM. The slot is cancelled to stop, which ends the pause at once."""


class Consumer:
    def __init__(self, consumer: int, slots: int, consumers: "Consumers") -> None:
        self.consumer = consumer
        self._consumers = consumers
        self.queue: collections.deque[Deliver] = collections.deque()
        self._work = asyncio.Event()
        self.runs: set[Run] = set()
        self._max_slots = slots
        self._slots: list[asyncio.Task[None]] = []

    def push(self, command: Deliver) -> None:
        queue = self.queue
        queue.append(command)
        self._work.set()
        # One more slot once the idle ones cannot take all that is queued: started up front,
        # 1024 consumers x 10,000 slots were ten million idle tasks, and creating them held
        # the event loop (lease renewals, SIGTERM) for minutes.
        slots = self._slots
        idle = len(slots) - len(self.runs)
        if len(slots) < self._max_slots and idle * self._consumers.run_limit < len(queue):
            name = f"consumer-{self.consumer}-slot-{len(slots)}"
            slots.append(asyncio.create_task(self._slot(), name=name))

    def withdraw_queued(self) -> list[Outcome]:
        queued = withdrawn(self.queue)
        self.queue.clear()
        return queued

    def take_out(self, stale: Callable[[Deliver], bool]) -> list[Outcome]:
        """Withdraw what `stale` picks among the deliveries queued or in runs, not started."""
        taken = [command for command in self.queue if stale(command)]
        if taken:
            # In place: a slot waiting in _take holds this deque.
            kept = [command for command in self.queue if not stale(command)]
            self.queue.clear()
            self.queue.extend(kept)
        for run in self.runs:
            taken += run.take_out(stale)
        return withdrawn(taken)

    async def _take(self) -> list[Deliver]:
        queue = self.queue
        while not queue:
            self._work.clear()
            await self._work.wait()
        limit = self._consumers.run_limit
        if len(queue) < limit and (wait := self._consumers.batch_wait) > 0:
            await self._fill(limit, wait)
        return [queue.popleft() for _ in range(min(limit, len(queue)))]

    async def _fill(self, limit: int, wait: float) -> None:
        """A batch handler's max_batch_wait: let more deliveries arrive, up to `limit`."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait
        while len(self.queue) < limit and (left := deadline - loop.time()) > 0:
            self._work.clear()
            if not await wait_event(self._work, left):
                return

    async def _slot(self) -> None:
        consumers = self._consumers
        crash_pause = Backoff(first=FIRST_CRASH_PAUSE, longest=LONGEST_DELAY, lasting=0.0)
        while True:
            run = Run(await self._take(), consumers.message_timeout)
            self.runs.add(run)
            try:
                await consumers.execute(run)
            except asyncio.CancelledError:
                raise
            except BaseException as error:
                # Not a handler failing (that is an outcome), a bug around it: what the
                # handler was called on counts failed (so retry limits and backoff apply),
                # the rest is handed back, and the slot pauses before it serves again.
                log.exception("consumer %s crashed running %s", self.consumer, run.commands)
                self.runs.discard(run)
                consumers.report(run.crashed(error) + self.withdraw_queued())
                consumers.check_idle()
                await asyncio.sleep(crash_pause.failed(time.monotonic()))
                continue
            crash_pause.succeeded(time.monotonic())
            await consumers.pacer.turn(len(run.commands))
            self.runs.discard(run)
            self._end(run)
            consumers.check_idle()

    def _end(self, run: Run) -> None:
        outcomes = run.unreported()
        if rest := run.cut():
            outcomes += withdrawn(rest)
        if run.broken:
            outcomes += self.withdraw_queued()
        self._consumers.report(outcomes)

    def cut_overrun(self, run: Run) -> list[Outcome]:
        """The machine failed the run's current call at its deadline and counts the slot busy
        until it returns: hand back what the run has not started, and the consumer's queue
        (it may have been meant for this slot), for redelivery elsewhere or later."""
        run.broken = True
        return withdrawn(run.cut()) + self.withdraw_queued()

    async def close(self) -> None:
        for slot in self._slots:
            slot.cancel()
        await asyncio.gather(*self._slots, return_exceptions=True)


class Consumers:
    def __init__(
        self,
        *,
        slots: int,
        run_limit: int,
        batch_wait: float,
        message_timeout: float,
        execute: Execute,
        report: Report,
    ) -> None:
        self.run_limit = run_limit
        self.batch_wait = batch_wait
        self.message_timeout = message_timeout
        self.execute = execute
        self.report = report
        self.pacer = Pacer(RUN_END_BUDGET)
        self._slots = slots
        self._consumers: dict[int, Consumer] = {}
        self._idle = asyncio.Event()
        self._idle.set()

    def push(self, command: Deliver) -> None:
        consumer = self._consumers.get(command.consumer)
        if consumer is None:
            consumer = self._consumers[command.consumer] = Consumer(
                command.consumer, self._slots, self
            )
        self._idle.clear()
        consumer.push(command)

    def take_out(self, stale: Callable[[Deliver], bool]) -> list[Outcome]:
        """Withdraw every delivery `stale` picks that no handler has started: an operator skip
        finished its message, so it must not run (docs/reference/commands.md: "finished, never
        delivered")."""
        outcomes = [o for c in self._consumers.values() for o in c.take_out(stale)]
        self.check_idle()
        return outcomes

    def check_idle(self) -> None:
        if not any(c.runs or c.queue for c in self._consumers.values()):
            self._idle.set()

    async def wait_idle(self) -> None:
        """Wait until every delivery pushed has ended."""
        await self._idle.wait()

    def watch(self) -> tuple[list[Outcome], list[list[int]]]:
        """On each tick: the outcomes running runs recorded since the last one, and the
        handler calls that started since (each a list of delivery ids: the machine times
        them from now on)."""
        outcomes: list[Outcome] = []
        starts: list[list[int]] = []
        for consumer in self._consumers.values():
            for run in consumer.runs:
                outcomes += run.unreported()
                current = run.current
                if current is not None and run.reported is not current[0]:
                    run.reported = current[0]
                    starts.append([command.delivery_id for command in current[0]])
        return outcomes, starts

    def cut_overruns(self, overran: Overran) -> list[Outcome]:
        """What waits behind calls the machine failed at their deadline, handed back."""
        outcomes: list[Outcome] = []
        for consumer in self._consumers.values():
            for run in list(consumer.runs):
                current = run.current
                if current is not None and not run.broken and overran(current[0][0].delivery_id):
                    outcomes += consumer.cut_overrun(run)
        return outcomes

    def delivering(self) -> list[Deliver]:
        """Deliveries whose handlers have been called and not yet returned."""
        return [
            command
            for consumer in self._consumers.values()
            for run in consumer.runs
            if (current := run.current) is not None
            for command in current[0]
        ]

    async def close(self) -> None:
        await asyncio.gather(*(consumer.close() for consumer in self._consumers.values()))
