"""One classification of a handler call's ending, and the tap that calls only the hooks an
observer overrides."""

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest

from poller.batch_handlers import batch_handler
from poller.daemon.delivery.handler_caller import HandlerCaller
from poller.daemon.delivery.handler_calls import (
    CallObserver,
    CallTap,
    Ending,
    HandlerCall,
    ending_of,
)
from poller.daemon.delivery.runs import Run, outcome_of
from poller.daemon.handlers import Handler
from poller.daemon.reporting.failure_log import FailureLog
from poller.daemon.reporting.metrics import SubscriptionMetrics
from poller.handler_requests import DestinationUnavailable, ParkMessage, RetryMessage, SkipMessage
from poller.message import Message
from poller.subscription import OutcomeKind
from tests.unit.daemon.runs_support import always, deliveries


@pytest.mark.parametrize(
    ("error", "ending", "kind"),
    [
        (None, Ending.DELIVERED, OutcomeKind.ACKED),
        (SkipMessage(), Ending.SKIPPED, OutcomeKind.ACKED),
        (ValueError("x"), Ending.FAILED, OutcomeKind.FAILED),
        (KeyboardInterrupt(), Ending.FAILED, OutcomeKind.FAILED),
        (RetryMessage(), Ending.RETRY_REQUESTED, OutcomeKind.FAILED),
        (ParkMessage("r"), Ending.PARK_REQUESTED, OutcomeKind.PARK_REQUESTED),
        (DestinationUnavailable("r"), Ending.UNAVAILABLE, OutcomeKind.UNAVAILABLE),
    ],
)
def test_the_machines_outcome_follows_the_one_ending(
    error: BaseException | None, ending: Ending, kind: OutcomeKind
) -> None:
    assert ending_of(error) is ending
    assert outcome_of(1, error, 0.0).kind is kind


def test_the_failure_log_alone_watches_no_call_that_succeeds() -> None:
    """Without a metrics port or tracing, a successful call builds nothing for anyone."""
    assert not CallTap([FailureLog()]).watching
    assert CallTap([FailureLog(), SubscriptionMetrics("s")]).watching


class Recorder(CallObserver):
    def __init__(self) -> None:
        self.seen: list[tuple[str, Any]] = []
        self.token: object = None

    def call_started(self, messages: Sequence[Message]) -> Any:
        self.token = object()
        self.seen.append(("started", [m.position for m in messages]))
        return self.token

    def call_ended(self, call: HandlerCall, started: Any) -> None:
        assert started is self.token  # what call_started gave, handed back
        self.seen.append(("ended", [e.value for e in call.endings]))

    def call_failed(self, call: HandlerCall) -> None:
        self.seen.append(("failed", [m.position for m in call.messages]))


@pytest.mark.parametrize("shape", ["def", "async def", "batch def", "batch async def"])
def test_every_call_path_reports_at_the_one_tap(shape: str) -> None:
    def outcome(message: Message) -> None:
        if message.position == 2:
            raise ValueError("two")

    async def async_one(message: Message) -> None:
        outcome(message)

    @batch_handler()
    def batch(messages: list[Message]) -> dict[object, BaseException]:
        return {messages[1].at: ValueError("two")}

    @batch_handler()
    async def async_batch(messages: list[Message]) -> dict[object, BaseException]:
        return batch(messages)

    handlers: dict[str, Handler] = {"def": outcome, "async def": async_one, "batch def": batch}
    handler = handlers.get(shape, async_batch)
    recorder = Recorder()
    caller = HandlerCaller(handler, 1, [recorder])
    asyncio.run(caller(Run(deliveries(3), 30.0), always))
    caller.close()
    if shape.startswith("batch"):
        assert recorder.seen == [
            ("started", [1, 2, 3]),
            ("ended", ["delivered", "failed", "delivered"]),
            ("failed", [1, 2, 3]),
        ]
    else:  # the run stops at the failure
        assert recorder.seen == [
            ("started", [1]),
            ("ended", ["delivered"]),
            ("started", [2]),
            ("ended", ["failed"]),
            ("failed", [2]),
        ]
