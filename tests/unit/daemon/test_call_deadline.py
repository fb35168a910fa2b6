"""poller.call_deadline(): inside a handler call, when the daemon fails that call (its start
plus n x message_timeout for n messages); None outside one."""

import asyncio
import time
from collections.abc import Callable
from typing import Any

import pytest

import poller
from poller.daemon.delivery.handler_caller import HandlerCaller
from poller.daemon.delivery.runs import Run
from poller.message import Message
from tests.unit.daemon.runs_support import always, deliveries

TIMEOUT = 7.0
Look = Callable[[int], None]


def handler_of(kind: str, look: Look) -> Any:
    async def one_async(_message: Message) -> None:
        look(1)

    def one_sync(_message: Message) -> None:
        look(1)

    async def batch_async(messages: list[Message]) -> None:
        look(len(messages))

    def batch_sync(messages: list[Message]) -> None:
        look(len(messages))

    def sync_returning_a_coroutine(message: Message) -> Any:
        return one_async(message)

    return {
        "async": one_async,
        "sync": one_sync,
        "async batch": poller.batch_handler()(batch_async),
        "sync batch": poller.batch_handler()(batch_sync),
        "sync returning a coroutine": sync_returning_a_coroutine,
    }[kind]


@pytest.mark.parametrize(
    "kind", ["async", "sync", "async batch", "sync batch", "sync returning a coroutine"]
)
async def test_a_handler_call_sees_when_the_daemon_fails_it(kind: str) -> None:
    seen: list[tuple[float, int, float | None]] = []

    def look(messages: int) -> None:
        seen.append((time.monotonic(), messages, poller.call_deadline()))

    caller = HandlerCaller(handler_of(kind, look), 2)
    try:
        await caller(Run(deliveries(3), TIMEOUT), always)
    finally:
        caller.close()
    assert len(seen) == (1 if "batch" in kind else 3)
    for began, messages, deadline in seen:
        assert deadline is not None
        # Timed from the claim, a moment before the call began.
        assert began - 0.5 < deadline - messages * TIMEOUT <= began
    assert poller.call_deadline() is None


async def test_there_is_no_deadline_outside_a_call() -> None:
    assert poller.call_deadline() is None
    assert await asyncio.to_thread(poller.call_deadline) is None
