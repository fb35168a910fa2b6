"""The handler wrapper's outcome tally: pure logic, no server, no database."""

import asyncio
import dataclasses
import inspect
import time
from collections.abc import Callable

import pytest

from poller.batch_handlers import batch_handler, batch_options
from poller.daemon.handler_caller import HandlerCaller
from poller.daemon.metrics import HANDLER_BUCKETS, HandlerTally, SubscriptionMetrics
from poller.daemon.runs import Run
from poller.membership import ShardUnit
from poller.message import Message
from poller.outcomes import ParkMessage, RetryMessage, SkipMessage
from poller.subscription import SubscriptionSettings
from tests.unit.daemon.test_handler_caller import always, deliveries
from tests.unit.daemon.test_handlers import a_message


@dataclasses.dataclass
class FakeView:
    """A term's view with only what the wrapper reads (the message timeout)."""

    settings: SubscriptionSettings
    in_flight_by_consumer: dict[int, int] = dataclasses.field(default_factory=dict)
    buffered_count: int = 0
    retry_queue_length: int = 0


def raising(error: BaseException | None) -> Callable[[Message], None]:
    def handler(_message: Message) -> None:
        if error is not None:
            raise error

    return handler


@pytest.mark.parametrize(
    ("error", "outcome"),
    [
        (None, "delivered"),
        (ValueError("boom"), "failed"),
        (SystemExit(3), "failed"),
        (RetryMessage(), "retry_requested"),
        (ParkMessage("no"), "park_requested"),
        (SkipMessage(), "skipped"),
    ],
)
def test_a_sync_call_is_tallied_by_how_it_ended(error: BaseException | None, outcome: str) -> None:
    metrics = SubscriptionMetrics("sub")
    observed = metrics.observed(raising(error))
    assert not inspect.iscoroutinefunction(observed)
    if error is None:
        observed(a_message())
    else:
        with pytest.raises(type(error)):
            observed(a_message())
    tally = metrics.tally.snapshot()
    assert {name: tally.calls(name) for name in tally.buckets if tally.calls(name)} == {outcome: 1}


async def test_an_async_handler_stays_async_and_is_timed_to_its_end() -> None:
    async def handler(_message: Message) -> None:
        await asyncio.sleep(0.03)
        raise RetryMessage()

    metrics = SubscriptionMetrics("sub")
    observed = metrics.observed(handler)
    assert inspect.iscoroutinefunction(observed)  # HandlerCaller keeps it on the loop
    caller = HandlerCaller(observed, threads=1)
    retried = dataclasses.replace(deliveries(1)[0], attempt=2)
    run = Run([retried], 30.0)
    await caller(run, always)
    assert run.outcomes[0].detail == "retry requested by the handler"
    tally = metrics.tally.snapshot()
    assert tally.calls("retry_requested") == 1
    assert tally.sums["retry_requested"] >= 0.03
    assert tally.retried == 1


async def test_a_sync_handler_returning_an_awaitable_is_timed_to_the_awaitables_end() -> None:
    async def later() -> None:
        await asyncio.sleep(0.03)

    metrics = SubscriptionMetrics("sub")
    await metrics.observed(lambda _message: later())(a_message())
    assert metrics.tally.snapshot().sums["delivered"] >= 0.03


def test_a_call_past_the_message_timeout_is_tallied_timed_out_whatever_it_returned() -> None:
    metrics = SubscriptionMetrics("sub")
    metrics.leading(FakeView(SubscriptionSettings(message_timeout=0.01)), ShardUnit(1, 0))
    metrics.observed(lambda _message: time.sleep(0.02))(a_message())
    assert metrics.tally.snapshot().calls("timed_out") == 1


def test_a_first_attempt_is_no_retry() -> None:
    metrics = SubscriptionMetrics("sub")
    metrics.observed(raising(None))(a_message())
    assert metrics.tally.snapshot().retried == 0


def test_a_duration_on_a_bucket_bound_counts_in_that_bucket() -> None:
    tally = HandlerTally()
    tally.call_ended("delivered", HANDLER_BUCKETS[2])  # Prometheus buckets are `le`
    tally.call_ended("delivered", HANDLER_BUCKETS[-1] + 1)
    buckets = tally.snapshot().buckets["delivered"]
    assert buckets[2] == 1
    assert buckets[-1] == 1
    assert sum(buckets) == 2


async def test_a_batch_handler_stays_a_batch_handler_and_counts_each_message() -> None:
    @batch_handler(max_batch_size=7, max_batch_wait=0.5)
    async def handler(messages: list[Message]) -> dict[object, BaseException]:
        await asyncio.sleep(0.03)
        return {messages[0].at: ParkMessage("no")}

    metrics = SubscriptionMetrics("sub")
    observed = metrics.observed(handler)
    assert batch_options(observed) == batch_options(handler)
    assert inspect.iscoroutinefunction(observed)
    caller = HandlerCaller(observed, threads=1)
    await caller(Run(deliveries(3), 30.0), always)
    tally = metrics.tally.snapshot()
    assert (tally.calls("park_requested"), tally.calls("delivered")) == (1, 2)
    assert tally.sums["delivered"] >= 0.06


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

    metrics = SubscriptionMetrics("sub")
    caller = HandlerCaller(metrics.observed(handler), threads=1)
    run = Run(deliveries(3), 30.0)
    asyncio.run(caller(run, always))
    assert [outcome.kind.name for outcome in run.outcomes] == ["FAILED"] * 3
    tally = metrics.tally.snapshot()
    assert (tally.calls("failed"), tally.calls("delivered")) == (3, 0)


def test_a_batch_return_naming_a_non_exception_fails_that_message_in_the_tally_too() -> None:
    @batch_handler()
    def handler(messages: list[Message]) -> object:
        return {messages[1].at: "not an exception"}

    metrics = SubscriptionMetrics("sub")
    caller = HandlerCaller(metrics.observed(handler), threads=1)
    run = Run(deliveries(3), 30.0)
    asyncio.run(caller(run, always))
    assert [outcome.kind.name for outcome in run.outcomes] == ["ACKED", "FAILED", "ACKED"]
    tally = metrics.tally.snapshot()
    assert (tally.calls("failed"), tally.calls("delivered")) == (1, 2)
