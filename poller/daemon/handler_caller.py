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
from collections.abc import Awaitable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, cast

from poller.batch_handlers import BatchOptions, batch_failures, batch_options
from poller.daemon.failure_log import FailureLog
from poller.daemon.handlers import Handler, is_async
from poller.daemon.pacing import Turns
from poller.daemon.runs import MayStart, Run, outcome_of
from poller.handler_deadlines import call_deadline, calling_until
from poller.message import Message
from poller.subscription import Deliver, Envelope, Outcome, OutcomeKind

_ACKED = OutcomeKind.ACKED

log = logging.getLogger(__name__)


class HandlerCaller:
    """Runs a subscription's handler over runs of deliveries, so a blocking handler never
    stalls reading, leases or checkpoints."""

    def __init__(self, handler: Handler, threads: int, failures: FailureLog | None = None) -> None:
        self._handler = handler
        self._failures = failures or FailureLog()
        self.batch: BatchOptions | None = batch_options(handler)
        self._pool = None if is_async(handler) else ThreadPoolExecutor(threads, "outbox-handler")
        # Runs on threads outlive a cancelled term; a new term waits for them so a key is
        # never handled twice at once within this process.
        self._running: dict[int, Run] = {}  # by thread id
        self._running_lock = threading.Lock()
        self._quiet = asyncio.Event()  # set (from the last thread to finish) when none runs
        # Runs handed to the pool at once, no more than it has threads: queued in the pool,
        # runs of handlers that fail at once ended faster than the loop took them, and their
        # wake-ups filled the loop's self-pipe, which then dropped SIGTERM.
        self._pool_turns = Turns(threads)

    async def __call__(self, run: Run, may_start: MayStart) -> None:
        """Call the handler on the run's deliveries, recording their outcomes in it;
        `may_start(delivery)` is asked right before each starts (on the handler's thread)."""
        if self._pool is None:
            if self.batch is None:
                await self._run_async(run, may_start)
            else:
                await self._run_batch_async(run, may_start)
            return
        loop = asyncio.get_running_loop()
        await self._pool_turns.take()
        try:
            await loop.run_in_executor(self._pool, self._on_thread, loop, run, may_start)
        finally:
            self._pool_turns.give_back()

    async def _run_async(self, run: Run, may_start: MayStart) -> None:
        handler = self._handler
        while (command := run.claim(may_start)) is not None:
            message = delivered_message(command)
            try:
                with calling_until(run.deadline()):
                    await handler(message)
            except BaseException as error:  # the handler's failure is data, whatever it is
                if _cancelled_from_outside(error):
                    raise
                outcome = self._failed(command, message, error)
            else:
                outcome = Outcome(command.delivery_id, _ACKED, "", time.monotonic())
            if not run.ended(outcome):
                return

    async def _run_batch_async(self, run: Run, may_start: MayStart) -> None:
        commands = run.claim_all(may_start)
        if not commands:
            return
        messages = [delivered_message(command) for command in commands]
        try:
            with calling_until(run.deadline()):
                result = await self._handler(messages)
        except BaseException as error:
            if _cancelled_from_outside(error):
                raise
            run.ended_batch(self._batch_failed(commands, messages, error))
        else:
            run.ended_batch(self._batch_returned(commands, messages, result))

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
        while (command := run.claim(may_start)) is not None:
            message = delivered_message(command)
            try:
                with calling_until(run.deadline()):
                    result = handler(message)
                    if inspect.isawaitable(result):  # a plain def that returns an awaitable
                        _await_on(loop, result)
            except BaseException as error:  # the handler's failure is data, whatever it is
                outcome = self._failed(command, message, error)
            else:
                outcome = Outcome(command.delivery_id, _ACKED, "", time.monotonic())
            if not run.ended(outcome):
                return

    def _run_batch_sync(
        self, loop: asyncio.AbstractEventLoop, run: Run, may_start: MayStart
    ) -> None:
        commands = run.claim_all(may_start)
        if not commands:
            return
        messages = [delivered_message(command) for command in commands]
        try:
            with calling_until(run.deadline()):
                result = self._handler(messages)
                if inspect.isawaitable(result):
                    result = _await_on(loop, result)
        except BaseException as error:
            run.ended_batch(self._batch_failed(commands, messages, error))
        else:
            run.ended_batch(self._batch_returned(commands, messages, result))

    def _failed(self, command: Deliver, message: Message, error: BaseException) -> Outcome:
        ended_at = time.monotonic()  # before the log line, which is not the handler's time
        self._failures.failed(message, error, first=command.attempt == 1)
        return outcome_of(command.delivery_id, error, ended_at)

    def _batch_failed(
        self, commands: list[Deliver], messages: list[Message], error: BaseException
    ) -> list[Outcome]:
        ended_at = time.monotonic()
        first = any(command.attempt == 1 for command in commands)
        self._failures.failed(messages, error, first=first)
        return [outcome_of(command.delivery_id, error, ended_at) for command in commands]

    def _batch_returned(
        self, commands: list[Deliver], messages: list[Message], result: object
    ) -> list[Outcome]:
        return batch_outcomes(commands, messages, result, time.monotonic(), self._failures)

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
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)


def batch_outcomes(
    commands: list[Deliver],
    messages: list[Message],
    result: object,
    ended_at: float,
    failure_log: FailureLog,
) -> list[Outcome]:
    """A batch handler's return: None (all done) or a mapping of positions to exceptions."""
    if result is None:  # the common case, without a list of Nones
        return [Outcome(command.delivery_id, _ACKED, "", ended_at) for command in commands]
    failures = batch_failures(messages, result)
    for command, message, failure in zip(commands, messages, failures, strict=True):
        if failure is not None:
            failure_log.failed(message, failure, first=command.attempt == 1)
    return [
        outcome_of(command.delivery_id, failure, ended_at)
        for command, failure in zip(commands, failures, strict=True)
    ]


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
