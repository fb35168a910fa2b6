"""The metrics' tally of handler calls, as the handler caller's one tap tells it: pure logic,
no server, no database."""

import asyncio
import dataclasses
import time
from collections.abc import Callable
from typing import Any

import pytest

from poller.batch_handlers import batch_handler
from poller.daemon.delivery.handler_caller import HandlerCaller
from poller.daemon.delivery.runs import Run
from poller.daemon.reporting.metrics import HANDLER_BUCKETS, HandlerTally, SubscriptionMetrics
from poller.handler_requests import DestinationUnavailable, ParkMessage, RetryMessage, SkipMessage
from poller.message import Message
from tests.unit.daemon.runs_support import always, deliveries


def raising(error: BaseException | None) -> Callable[[Message], None]:
    def handler(_message: Message) -> None:
        if error is not None:
            raise error

    return handler


def tallied(handler: Any, run: Run) -> tuple[Run, SubscriptionMetrics]:
    """`run` through `handler`, observed by a subscription's metrics."""
    metrics = SubscriptionMetrics("sub")
    caller = HandlerCaller(handler, threads=1, observers=[metrics])
    try:
        asyncio.run(caller(run, always))
    finally:
        caller.close()
    return run, metrics


def calls_by_outcome(metrics: SubscriptionMetrics) -> dict[str, int]:
    tally = metrics.tally.snapshot()
    return {name: tally.calls(name) for name in tally.buckets if tally.calls(name)}


@pytest.mark.parametrize("kind", ["sync", "async"])
@pytest.mark.parametrize(
    ("error", "outcome"),
    [
        (None, "delivered"),
        (ValueError("boom"), "failed"),
        (SystemExit(3), "failed"),
        (KeyboardInterrupt(), "failed"),
        (RetryMessage(), "retry_requested"),
        (ParkMessage("no"), "park_requested"),
        (SkipMessage(), "skipped"),
        (DestinationUnavailable("down"), "destination_unavailable"),
    ],
)
def test_a_call_is_tallied_by_how_it_ended(
    kind: str, error: BaseException | None, outcome: str
) -> None:
    handler: Any = raising(error)
    if kind == "async":

        async def handler(_message: Message) -> None:
            if error is not None:
                raise error

    _, metrics = tallied(handler, Run(deliveries(1), 30.0))
    assert calls_by_outcome(metrics) == {outcome: 1}


def test_an_async_handler_is_timed_to_its_end_and_a_retry_counted() -> None:
    async def handler(_message: Message) -> None:
        await asyncio.sleep(0.03)
        raise RetryMessage()

    retried = dataclasses.replace(deliveries(1)[0], attempt=2)
    run, metrics = tallied(handler, Run([retried], 30.0))
    assert run.outcomes[0].detail == "retry requested by the handler"
    tally = metrics.tally.snapshot()
    assert tally.calls("retry_requested") == 1
    assert tally.sums["retry_requested"] >= 0.03
    assert tally.retried == 1


def test_a_sync_handler_returning_an_awaitable_is_timed_to_the_awaitables_end() -> None:
    async def later() -> None:
        await asyncio.sleep(0.03)

    _, metrics = tallied(lambda _message: later(), Run(deliveries(1), 30.0))
    assert metrics.tally.snapshot().sums["delivered"] >= 0.03


@pytest.mark.parametrize("returns", [None, SkipMessage()])
def test_a_call_past_the_message_timeout_is_tallied_timed_out_whatever_it_returned(
    returns: BaseException | None,
) -> None:
    def slow(_message: Message) -> None:
        time.sleep(0.02)
        if returns is not None:
            raise returns

    run, metrics = tallied(slow, Run(deliveries(1), 0.01))
    assert calls_by_outcome(metrics) == {"timed_out": 1}
    assert run.broken  # the run's own verdict, from the same deadline


def test_a_first_attempt_is_no_retry() -> None:
    _, metrics = tallied(raising(None), Run(deliveries(2), 30.0))
    assert metrics.tally.snapshot().retried == 0


def test_a_duration_on_a_bucket_bound_counts_in_that_bucket() -> None:
    tally = HandlerTally()
    tally.call_ended("delivered", HANDLER_BUCKETS[2])  # Prometheus buckets are `le`
    tally.call_ended("delivered", HANDLER_BUCKETS[-1] + 1)
    buckets = tally.snapshot().buckets["delivered"]
    assert buckets[2] == 1
    assert buckets[-1] == 1
    assert sum(buckets) == 2


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_a_batch_call_counts_each_message_for_the_whole_call(kind: str) -> None:
    def outcomes(messages: list[Message]) -> dict[object, BaseException]:
        return {messages[0].at: ParkMessage("no")}

    @batch_handler(max_batch_size=7)
    def sync_handler(messages: list[Message]) -> dict[object, BaseException]:
        time.sleep(0.03)
        return outcomes(messages)

    @batch_handler(max_batch_size=7)
    async def async_handler(messages: list[Message]) -> dict[object, BaseException]:
        await asyncio.sleep(0.03)
        return outcomes(messages)

    handler = sync_handler if kind == "sync" else async_handler
    retried = [dataclasses.replace(d, attempt=3) for d in deliveries(3)]
    _, metrics = tallied(handler, Run(retried, 30.0))
    tally = metrics.tally.snapshot()
    assert (tally.calls("park_requested"), tally.calls("delivered")) == (1, 2)
    assert tally.sums["delivered"] >= 0.06
    assert tally.retried == 3


def test_a_batch_call_that_raises_counts_each_message_failed() -> None:
    @batch_handler()
    async def handler(_messages: list[Message]) -> None:
        raise ValueError("boom")

    _, metrics = tallied(handler, Run(deliveries(4), 30.0))
    assert calls_by_outcome(metrics) == {"failed": 4}


@pytest.mark.parametrize(
    "result",
    [
        ["not", "a", "mapping"],
        {"no such position": ValueError("boom")},
        "a string",
    ],
)
def test_a_malformed_batch_return_is_tallied_as_the_daemon_takes_it(result: object) -> None:
    """Every message failed, as the caller reports them to the machine, not delivered."""

    @batch_handler()
    def handler(_messages: list[Message]) -> object:
        return result

    run, metrics = tallied(handler, Run(deliveries(3), 30.0))
    assert [outcome.kind.name for outcome in run.outcomes] == ["FAILED"] * 3
    assert calls_by_outcome(metrics) == {"failed": 3}


def test_a_batch_return_naming_a_non_exception_fails_that_message_in_the_tally_too() -> None:
    @batch_handler()
    def handler(messages: list[Message]) -> object:
        return {messages[1].at: "not an exception"}

    run, metrics = tallied(handler, Run(deliveries(3), 30.0))
    assert [outcome.kind.name for outcome in run.outcomes] == ["ACKED", "FAILED", "ACKED"]
    assert calls_by_outcome(metrics) == {"failed": 1, "delivered": 2}
