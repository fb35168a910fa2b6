"""Handler failures at the default log level: a traceback for each message's first failure,
at most so many a minute per subscription, and then a count of those left out."""

import asyncio

import pytest

from poller.batch_handlers import batch_handler
from poller.daemon.delivery.handler_caller import HandlerCaller, payload_message
from poller.daemon.delivery.runs import Run
from poller.daemon.reporting.failure_log import FailureLog, LogBudget
from poller.handler_requests import DestinationUnavailable, ParkMessage, RetryMessage, SkipMessage
from poller.message import Message
from tests.unit.daemon.runs_support import always, deliveries


def test_a_budget_allows_so_many_per_window_then_counts_what_it_left_out() -> None:
    budget = LogBudget(allowed=2, window=60.0)
    assert [budget.take(now) for now in (0.0, 1.0, 2.0, 3.0, 59.9)] == [0, 0, None, None, None]
    assert budget.take(60.0) == 3  # a new window: the next line says three were left out
    assert budget.take(61.0) == 0
    assert budget.take(62.0) is None
    assert budget.take(500.0) == 1


def test_a_poison_storm_writes_a_few_tracebacks_then_says_how_many_it_left_out(
    caplog: pytest.LogCaptureFixture,
) -> None:
    now = [0.0]
    failures = FailureLog("billing", LogBudget(allowed=3, window=60.0), clock=lambda: now[0])
    caplog.set_level("INFO", logger="poller.daemon.reporting.failure_log")
    messages = [payload_message(delivery.envelope) for delivery in deliveries(50)]
    for message in messages:
        failures.failed(message, ValueError("poison"), first=True)
    assert len(caplog.records) == 3
    assert all(r.levelname == "WARNING" and r.exc_info for r in caplog.records)
    assert caplog.records[0].getMessage().startswith("subscription billing: handler failed on")
    now[0] = 60.0
    failures.failed(messages[0], ValueError("poison"), first=True)
    assert "(47 more handler failures left out of the log" in caplog.records[-1].getMessage()


@pytest.mark.parametrize(
    "request_",
    [DestinationUnavailable("broker down"), RetryMessage(), ParkMessage("no"), SkipMessage()],
)
def test_an_outcome_request_is_not_a_failure_to_log(
    caplog: pytest.LogCaptureFixture, request_: BaseException
) -> None:
    """A relay's broker down raises DestinationUnavailable on every retry: no traceback."""
    caplog.set_level("DEBUG", logger="poller.daemon.reporting.failure_log")

    @batch_handler()
    async def relay(_messages: list[Message]) -> None:
        raise request_

    asyncio.run(HandlerCaller(relay, 1, [FailureLog("relay")])(Run(deliveries(3), 30.0), always))
    assert caplog.records == []


def test_a_batch_call_that_raised_is_one_line_and_a_returned_failure_one_per_message(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level("INFO", logger="poller.daemon.reporting.failure_log")

    @batch_handler()
    async def raising(_messages: list[Message]) -> None:
        raise ValueError("all of them")

    @batch_handler()
    async def naming(messages: list[Message]) -> dict[object, BaseException]:
        return {messages[0].at: ValueError("one"), messages[2].at: ValueError("another")}

    for handler in (raising, naming):
        asyncio.run(HandlerCaller(handler, 1, [FailureLog("b")])(Run(deliveries(3), 30.0), always))
    lines = [record.getMessage() for record in caplog.records]
    assert len(lines) == 3
    assert "a batch of 3 messages" in lines[0]
    assert "position=1," in lines[1]
    assert "position=3," in lines[2]
