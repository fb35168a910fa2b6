"""Calling the handler over a run: async handlers on the loop, plain ones on a thread.

A plain `def` handler goes through a whole run on one pool thread: one hop there and one back
per run, not per message. A batch handler gets the run as one list.
"""

import asyncio
import inspect
import logging
import threading
import time
from asyncio import FIRST_COMPLETED
from collections.abc import Awaitable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, cast

from poller.batch_handlers import BatchOptions, batch_failures, batch_options
from poller.daemon.delivery.handler_calls import CallObserver, CallTap, HandlerCall, ending_of
from poller.daemon.delivery.pacing import Turns
from poller.daemon.delivery.runs import MayStart, Run, outcome_of
from poller.daemon.handlers import Handler, is_async
from poller.handler_deadlines import call_deadline, calling_until
from poller.message import Message
from poller.subscription import Deliver, Envelope, Outcome, OutcomeKind

_ACKED = OutcomeKind.ACKED

log = logging.getLogger(__name__)


class HandlerThreads:
    """The threads a plain `def` handler runs on, and the turns that keep runs handed to them
    no more than there are threads. A subscription's shards in a process share one: its
    `handler_threads` is per subscription, so 16 shards led in one process do not run 16 times
    as many threads, whose contention for the GIL starved the event loop of its lease
    renewals until leases lapsed."""

    def __init__(self, threads: int) -> None:
        self.pool = ThreadPoolExecutor(threads, "outbox-handler")
        # Runs handed to the pool at once, no more than it has threads: queued in the pool,
        # runs of handlers that fail at once ended faster than the loop took them, and their
        # wake-ups filled the loop's self-pipe, which then dropped SIGTERM.
        self.turns = Turns(threads)

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)


class HandlerCaller:
    """Runs a subscription's handler over runs of deliveries, so a blocking handler never
    stalls reading, leases or checkpoints; each call's ending is classified once and told
    to the observers (handler_calls.py: the failure log, metrics, spans)."""

    def __init__(
        self,
        handler: Handler,
        threads: int | HandlerThreads,
        observers: Sequence[CallObserver] = (),
    ) -> None:
        """`threads`: how many of its own, or threads shared with other callers (closed by
        whoever made them)."""
        self._handler = handler
        self._tap = CallTap(observers)
        self.batch: BatchOptions | None = batch_options(handler)
        self._own_threads = isinstance(threads, int)
        self._threads: HandlerThreads | None = None
        if not is_async(handler):
            self._threads = HandlerThreads(threads) if isinstance(threads, int) else threads
        # Runs on threads outlive a cancelled term; a new term waits for them so a key is
        # never handled twice at once within this process.
        self._running: dict[int, Run] = {}  # by thread id
        self._running_lock = threading.Lock()
        self._quiet = asyncio.Event()  # set (from the last thread to finish) when none runs

    async def __call__(self, run: Run, may_start: MayStart) -> None:
        """Call the handler on the run's deliveries, recording their outcomes in it;
        `may_start(delivery)` is asked right before each starts (on the handler's thread)."""
        threads = self._threads
        if threads is None:
            if self.batch is None:
                await self._run_async(run, may_start)
            else:
                await self._run_batch_async(run, may_start)
            return
        loop = asyncio.get_running_loop()
        await threads.turns.take()
        try:
            await loop.run_in_executor(threads.pool, self._on_thread, loop, run, may_start)
        finally:
            threads.turns.give_back()

    async def _run_async(self, run: Run, may_start: MayStart) -> None:
        handler = self._handler
        tap = self._tap
        while (command := run.claim(may_start)) is not None:
            message = delivered_message(command)
            timing = run.timing()
            started = tap.started((message,)) if tap.watching else None
            try:
                with calling_until(timing[1]):
                    await handler(message)
            except BaseException as error:  # the handler's failure is data, whatever it is
                if _cancelled_from_outside(error):
                    self._ended(command, message, error, timing, started, cancelled=True)
                    raise
                outcome = self._ended(command, message, error, timing, started)
            else:
                if started is None:  # the usual case, told to nobody
                    outcome = Outcome(command.delivery_id, _ACKED, "", time.monotonic())
                else:
                    outcome = self._ended(command, message, None, timing, started)
            if not run.ended(outcome):
                return

    async def _run_batch_async(self, run: Run, may_start: MayStart) -> None:
        commands = run.claim_all(may_start)
        if not commands:
            return
        messages = [delivered_message(command) for command in commands]
        timing = run.timing()
        started = self._tap.started(messages) if self._tap.watching else None
        try:
            with calling_until(timing[1]):
                result = await self._handler(messages)
        except BaseException as error:
            if _cancelled_from_outside(error):
                self._batch_ended(commands, messages, error, None, timing, started, True)
                raise
            run.ended_batch(self._batch_ended(commands, messages, error, None, timing, started))
        else:
            run.ended_batch(self._batch_ended(commands, messages, None, result, timing, started))

    def _on_thread(self, loop: asyncio.AbstractEventLoop, run: Run, may_start: MayStart) -> None:
        thread = threading.get_ident()
        with self._running_lock:
            self._running[thread] = run
        try:
            if self.batch is None:
                self._run_sync(loop, run, may_start)
            else:
                self._run_batch_sync(loop, run, may_start)
        finally:
            with self._running_lock:
                del self._running[thread]
                quiet = not self._running
            if quiet:
                loop.call_soon_threadsafe(self._quiet.set)

    def _run_sync(self, loop: asyncio.AbstractEventLoop, run: Run, may_start: MayStart) -> None:
        handler = self._handler
        tap = self._tap
        while (command := run.claim(may_start)) is not None:
            message = delivered_message(command)
            timing = run.timing()
            started = tap.started((message,)) if tap.watching else None
            try:
                with calling_until(timing[1]):
                    result = handler(message)
                    if inspect.isawaitable(result):  # a plain def that returns an awaitable
                        _await_on(loop, result)
            except BaseException as error:  # the handler's failure is data, whatever it is
                outcome = self._ended(command, message, error, timing, started)
            else:
                if started is None:  # the usual case, told to nobody
                    outcome = Outcome(command.delivery_id, _ACKED, "", time.monotonic())
                else:
                    outcome = self._ended(command, message, None, timing, started)
            if not run.ended(outcome):
                return

    def _run_batch_sync(
        self, loop: asyncio.AbstractEventLoop, run: Run, may_start: MayStart
    ) -> None:
        commands = run.claim_all(may_start)
        if not commands:
            return
        messages = [delivered_message(command) for command in commands]
        timing = run.timing()
        started = self._tap.started(messages) if self._tap.watching else None
        try:
            with calling_until(timing[1]):
                result = self._handler(messages)
                if inspect.isawaitable(result):
                    result = _await_on(loop, result)
        except BaseException as error:
            run.ended_batch(self._batch_ended(commands, messages, error, None, timing, started))
        else:
            run.ended_batch(self._batch_ended(commands, messages, None, result, timing, started))

    def _ended(
        self,
        command: Deliver,
        message: Message,
        error: BaseException | None,
        timing: tuple[float, float],
        started: list[Any] | None,
        cancelled: bool = False,
    ) -> Outcome:
        """One message's call ended: its outcome for the machine, told to the observers."""
        ended_at = time.monotonic()  # before the observers, whose time is not the handler's
        ending = ending_of(error)
        call = HandlerCall(
            (message,), (error,), (ending,), error, timing[0], ended_at, ended_at >= timing[1]
        )
        self._tap.ended(call, started, failures=not cancelled)
        return outcome_of(command.delivery_id, error, ended_at, ending)

    def _batch_ended(
        self,
        commands: list[Deliver],
        messages: list[Message],
        error: BaseException | None,
        result: object,
        timing: tuple[float, float],
        started: list[Any] | None,
        cancelled: bool = False,
    ) -> list[Outcome]:
        """A batch call raised `error` or returned `result`: each message's outcome (a
        malformed return fails them all, read by `batch_failures`), told to the observers."""
        ended_at = time.monotonic()
        if error is None and result is None and started is None:  # the usual case
            return [Outcome(command.delivery_id, _ACKED, "", ended_at) for command in commands]
        errors = [error] * len(messages) if error is not None else batch_failures(messages, result)
        endings = [ending_of(failure) for failure in errors]
        call = HandlerCall(
            messages, errors, endings, error, timing[0], ended_at, ended_at >= timing[1]
        )
        self._tap.ended(call, started, failures=not cancelled)
        return [
            outcome_of(command.delivery_id, failure, ended_at, ending)
            for command, failure, ending in zip(commands, errors, endings, strict=True)
        ]

    def running(self) -> list[Message]:
        """The messages whose handlers run on a thread right now."""
        with self._running_lock:
            runs = list(self._running.values())
        return [
            delivered_message(command)
            for run in runs
            if (current := run.current) is not None
            for command in current[0]
        ]

    async def wait_quiet(self, stop: asyncio.Event, timeout: float) -> bool:
        """Wait until no handler thread runs; False if some still do when `stop` is set or
        after `timeout`."""
        with self._running_lock:
            if not self._running:
                return True
            # A thread that ends after this line schedules set() behind this coroutine's step.
            self._quiet.clear()
        quiet = asyncio.ensure_future(self._quiet.wait())
        stopped = asyncio.ensure_future(stop.wait())
        try:
            await asyncio.wait({quiet, stopped}, timeout=timeout, return_when=FIRST_COMPLETED)
        finally:
            quiet.cancel()
            stopped.cancel()
        return self._quiet.is_set()

    def close(self) -> None:
        if self._threads is not None and self._own_threads:
            self._threads.close()


def _cancelled_from_outside(error: BaseException) -> bool:
    """A CancelledError of the daemon's own cancelling (the term ends), which must go on
    up; one the handler raised itself (a timeout inside it, say) is its failure."""
    if not isinstance(error, asyncio.CancelledError):
        return False
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


def delivered_message(command: Deliver) -> Message:
    message = payload_message(command.envelope)
    if message.delivery_attempt != command.attempt:
        message = message.with_attempt(command.attempt)
    return message


def payload_message(envelope: Envelope) -> Message:
    """The machine carries the daemon's Message as an opaque payload; the term put it there."""
    return cast(Message, envelope.payload)


def _await_on(loop: asyncio.AbstractEventLoop, result: Awaitable[Any]) -> Any:
    """Await on the daemon's loop from a handler thread, which waits for the result."""
    deadline = call_deadline()  # the thread's, for the task the loop runs it in

    async def awaited() -> Any:
        with calling_until(deadline):
            return await result

    return asyncio.run_coroutine_threadsafe(awaited(), loop).result()
