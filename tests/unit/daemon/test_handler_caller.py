"""Runs through the handler caller: one hop per run, the run stops where a delivery did not
succeed, batch handlers' outcomes, and "started" and "withdrawn" never both for one delivery."""

import asyncio
import re
import threading
from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from outbox.positions import Position
from poller.batch_handlers import batch_handler
from poller.daemon.delivery.consumers import Consumers
from poller.daemon.delivery.handler_caller import HandlerCaller
from poller.daemon.delivery.runs import Run, withdrawn
from poller.daemon.reporting.failure_log import FailureLog
from poller.handler_requests import ParkMessage, RetryMessage, SkipMessage
from poller.message import Message
from poller.subscription import Outcome, OutcomeKind
from tests.unit.daemon.runs_support import always, deliveries, race_claims_against

ACKED, FAILED = OutcomeKind.ACKED, OutcomeKind.FAILED
PARK, WITHDRAWN = OutcomeKind.PARK_REQUESTED, OutcomeKind.WITHDRAWN


async def run_through(handler: Any, run: Run, threads: int = 2) -> list[tuple[int, OutcomeKind]]:
    caller = HandlerCaller(handler, threads, [FailureLog("sub")])
    try:
        await caller(run, always)
    finally:
        caller.close()
    outcomes = run.outcomes + withdrawn(run.cut())
    return [(outcome.delivery_id, outcome.kind) for outcome in outcomes]


async def test_a_plain_handler_goes_through_a_whole_run_on_one_thread() -> None:
    threads: list[int] = []
    loop_thread = threading.get_ident()

    def handler(_message: Message) -> None:
        threads.append(threading.get_ident())

    outcomes = await run_through(handler, Run(deliveries(5), 30.0))
    assert outcomes == [(n, ACKED) for n in range(1, 6)]
    assert len(set(threads)) == 1
    assert threads[0] != loop_thread


async def test_an_async_handler_runs_on_the_loop() -> None:
    threads: list[int] = []

    async def handler(_message: Message) -> None:
        threads.append(threading.get_ident())

    assert await run_through(handler, Run(deliveries(3), 30.0)) == [(n, ACKED) for n in (1, 2, 3)]
    assert set(threads) == {threading.get_ident()}


@pytest.mark.parametrize("kind", ["sync", "async"])
@pytest.mark.parametrize(
    ("error", "outcome"),
    [
        (ValueError("no"), FAILED),
        (RetryMessage(), FAILED),
        (ParkMessage("bad"), PARK),
        (SystemExit(3), FAILED),
    ],
)
async def test_a_run_stops_at_the_first_delivery_that_did_not_succeed(
    kind: str, error: BaseException, outcome: OutcomeKind
) -> None:
    """What follows it is handed back unstarted, so nothing runs ahead of its retry."""
    called: list[int] = []

    def sync_handler(message: Message) -> None:
        called.append(message.position)
        if message.position == 2:
            raise error

    async def async_handler(message: Message) -> None:
        sync_handler(message)

    run = Run(deliveries(4), 30.0)
    handler = sync_handler if kind == "sync" else async_handler
    outcomes = await run_through(handler, run)
    assert outcomes == [(1, ACKED), (2, outcome), (3, WITHDRAWN), (4, WITHDRAWN)]
    assert called == [1, 2]
    assert run.broken


async def test_a_skip_is_a_success_and_the_run_goes_on() -> None:
    def handler(message: Message) -> None:
        if message.position == 1:
            raise SkipMessage

    run = Run(deliveries(2), 30.0)
    assert await run_through(handler, run) == [(1, ACKED), (2, ACKED)]
    assert not run.broken


async def test_a_refused_start_cuts_the_run_there() -> None:
    """A seek while a run waited: the deliveries of the old epoch are never called."""
    called: list[int] = []
    caller = HandlerCaller(lambda message: called.append(message.position), 1)
    run = Run(deliveries(4), 30.0)
    await caller(run, lambda command: command.delivery_id < 3)
    caller.close()
    assert called == [1, 2]
    assert [command.delivery_id for command in run.cut()] == [3, 4]


async def test_a_delivery_longer_than_message_timeout_breaks_the_run() -> None:
    """The machine may have failed it already: its retry must not queue behind the rest."""

    def slow(_message: Message) -> None:
        threading.Event().wait(0.05)

    run = Run(deliveries(3), 0.01)
    assert await run_through(slow, run) == [(1, ACKED), (2, WITHDRAWN), (3, WITHDRAWN)]
    assert run.broken


@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_a_batch_handler_gets_the_run_as_one_list(kind: str) -> None:
    batches: list[list[int]] = []

    def record(messages: list[Message]) -> None:
        batches.append([message.position for message in messages])

    async def record_async(messages: list[Message]) -> None:
        record(messages)

    handler = batch_handler(max_batch_size=10)(record if kind == "sync" else record_async)
    assert await run_through(handler, Run(deliveries(4), 30.0)) == [(n, ACKED) for n in range(1, 5)]
    assert batches == [[1, 2, 3, 4]]


async def test_a_batch_that_raises_fails_every_message() -> None:
    @batch_handler()
    def handler(_messages: list[Message]) -> None:
        raise ParkMessage("poison")

    run = Run(deliveries(3), 30.0)
    assert await run_through(handler, run) == [(n, PARK) for n in (1, 2, 3)]
    assert {outcome.detail for outcome in run.outcomes} == {"poison"}


async def test_a_batch_handler_reports_outcomes_by_position() -> None:
    @batch_handler()
    def handler(messages: list[Message]) -> dict[Position, BaseException]:
        return {messages[1].at: RetryMessage(), messages[2].at: ParkMessage("no")}

    outcomes = await run_through(handler, Run(deliveries(4), 30.0))
    assert outcomes == [(1, ACKED), (2, FAILED), (3, PARK), (4, ACKED)]


@pytest.mark.parametrize(
    ("returned", "says"),
    [
        ([], "not a list"),
        ({Position(1, 99): ValueError()}, "not in its batch"),
    ],
)
async def test_a_batch_handler_returning_nonsense_fails_the_batch(
    returned: object, says: str
) -> None:
    @batch_handler()
    def handler(_messages: list[Message]) -> object:
        return returned

    run = Run(deliveries(2), 30.0)
    assert await run_through(handler, run) == [(1, FAILED), (2, FAILED)]
    assert says in run.outcomes[0].detail


@pytest.mark.parametrize(
    ("options", "says"),
    [
        ({"max_batch_size": 0}, "max_batch_size"),
        ({"max_batch_size": True}, "max_batch_size"),
        ({"max_batch_wait": -1}, "max_batch_wait"),
        ({"max_batch_wait": float("nan")}, "max_batch_wait"),
    ],
)
def test_bad_batch_options_name_the_value(options: dict[str, Any], says: str) -> None:
    with pytest.raises(ValueError, match=says) as refused:
        batch_handler(**options)
    assert repr(next(iter(options.values()))) in str(refused.value)


async def test_a_handler_thread_outliving_its_cancelled_run_is_waited_for() -> None:
    release = threading.Event()
    started = threading.Event()

    def blocking(_message: Message) -> None:
        started.set()
        release.wait(5)

    caller = HandlerCaller(blocking, 2)
    delivery = asyncio.ensure_future(caller(Run(deliveries(1), 30.0), always))
    await asyncio.get_running_loop().run_in_executor(None, started.wait, 5)
    delivery.cancel()  # the term ended; the thread runs on
    assert [message.position for message in caller.running()] == [1]
    stop = asyncio.Event()
    assert not await caller.wait_quiet(stop, 0.1)
    stop.set()
    assert not await caller.wait_quiet(stop, 5)  # a stop ends the wait at once
    release.set()
    assert await caller.wait_quiet(asyncio.Event(), 5)
    caller.close()


def test_no_delivery_is_both_started_and_withdrawn_when_a_cut_races_the_run() -> None:
    """The loop cuts an overrunning run while its thread claims the next delivery."""
    race_claims_against(Run.cut)


@pytest.mark.parametrize("kind", ["def", "batch"])
async def test_a_first_failure_logs_its_traceback_at_warning_and_a_handler_request_nothing(
    kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    """At the default level a failing message was silent until it parked, half a minute
    later; a later attempt of the same message says it again only at debug."""
    errors: list[BaseException] = [RetryMessage(), ZeroDivisionError("the handler's own bug")]

    def handler(_message: Message | list[Message]) -> None:
        raise errors.pop(0)

    called = batch_handler(max_batch_size=1)(handler) if kind == "batch" else handler
    caplog.set_level("DEBUG", logger="poller.daemon.reporting.failure_log")
    await run_through(called, Run(deliveries(1), 30.0))
    assert caplog.records == []  # RetryMessage chose an outcome; nothing failed
    await run_through(called, Run(deliveries(1), 30.0))
    [record] = caplog.records
    assert record.levelname == "WARNING"
    assert "handler failed on Message(" in record.getMessage()
    assert record.exc_info is not None
    assert record.exc_info[0] is ZeroDivisionError
    caplog.clear()
    errors.append(ValueError("again"))
    await run_through(called, Run(deliveries(1, attempt=2), 30.0))
    [again] = caplog.records
    assert again.levelname == "DEBUG"


async def test_a_failures_text_says_where_it_was_raised() -> None:
    """What the parked row's last_error keeps, and `outbox parked show` prints."""

    def save(message: Message) -> None:
        raise ValueError(f"no room for {message.position}")

    def handler(message: Message) -> None:
        save(message)

    run = Run(deliveries(1), 30.0)
    await run_through(handler, run)
    detail = run.outcomes[0].detail
    assert re.fullmatch(
        r"ValueError: no room for 1 \(raised at daemon/test_handler_caller\.py:\d+ in save,"
        r" from daemon/test_handler_caller\.py:\d+ in handler\)",
        detail,
    ), detail


async def test_a_huge_failure_text_is_cut_and_keeps_where_it_was_raised() -> None:
    def handler(_message: Message) -> None:
        raise ValueError("x" * 100_000)

    run = Run(deliveries(1), 30.0)
    await run_through(handler, run)
    detail = run.outcomes[0].detail
    assert len(detail) <= 2000
    assert detail.startswith("ValueError: xxx")
    assert re.search(r"\[cut \d+ characters\] \(raised at .*:\d+ in handler\)$", detail), detail


class BadStr(Exception):  # noqa: N818 - the name the issue gave it
    def __str__(self) -> str:
        raise RuntimeError("no text for you")


class BadEverything(Exception):  # noqa: N818 - named for what it does
    def __str__(self) -> str:
        raise RuntimeError

    def __repr__(self) -> str:
        raise RuntimeError


class Custom(BaseException):
    """Neither Exception, SystemExit nor KeyboardInterrupt."""


class ListKeyed(Mapping[object, BaseException]):
    """A mapping whose keys cannot be hashed."""

    def __getitem__(self, key: object) -> BaseException:
        raise KeyError(key)

    def __iter__(self) -> Iterator[object]:
        return iter([[1, 2]])

    def __len__(self) -> int:
        return 1


def handler_of_kind(kind: str, error: BaseException) -> Any:
    def sync_handler(_message: Any) -> None:
        raise error

    async def async_handler(_message: Any) -> None:
        raise error

    handler = sync_handler if kind in ("sync", "batch") else async_handler
    return batch_handler(max_batch_size=10)(handler) if kind.startswith("batch") else handler


@pytest.mark.parametrize("kind", ["sync", "async", "batch", "batch-async"])
@pytest.mark.parametrize(
    ("error", "says"),
    [
        (BadStr(), "BadStr: "),
        (BadEverything(), "BadEverything: <unprintable BadEverything> (str() failed)"),
        (Custom("mine"), "the handler raised Custom: mine"),
        (KeyboardInterrupt(), "the handler raised KeyboardInterrupt"),
        (asyncio.CancelledError(), "the handler raised CancelledError"),
    ],
)
async def test_whatever_a_handler_raises_is_one_failed_attempt(
    kind: str, error: BaseException, says: str
) -> None:
    """An unprintable exception crashed the consumer in a loop; a BaseException of the
    handler's own stalled its slot for good; KeyboardInterrupt ended the daemon."""
    run = Run(deliveries(2), 30.0)
    outcomes = await run_through(handler_of_kind(kind, error), run)
    assert outcomes[0] == (1, FAILED)
    assert run.outcomes[0].detail.startswith(says), run.outcomes[0].detail
    assert run.outcomes[0].ended_at is not None
    assert run.broken


async def test_a_cancellation_of_the_daemon_still_cancels_an_async_handler() -> None:
    started = asyncio.Event()

    async def waits(_message: Message) -> None:
        started.set()
        await asyncio.sleep(30)

    caller = HandlerCaller(waits, 1)
    call = asyncio.ensure_future(caller(Run(deliveries(1), 30.0), always))
    await started.wait()
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call


@pytest.mark.parametrize(
    ("returned", "says"),
    [
        (lambda messages: {messages[0].at: BadStr()}, "BadStr: "),
        (lambda _messages: ListKeyed(), "not in its batch: [[1, 2]]"),
        (lambda messages: {messages[0].at: BadEverything}, "not <class"),
    ],
)
async def test_a_batch_return_that_cannot_be_read_fails_the_batch(returned: Any, says: str) -> None:
    @batch_handler()
    def handler(messages: list[Message]) -> object:
        return returned(messages)

    run = Run(deliveries(2), 30.0)
    assert (await run_through(handler, run))[0] == (1, FAILED)
    assert says in run.outcomes[0].detail, run.outcomes[0].detail


async def test_a_consumer_that_crashes_around_the_handler_fails_the_attempt_and_pauses() -> None:
    """A crash outside the handler withdrew the delivery (no attempt counted), which went
    straight back to the same slot: a hot loop that starved the event loop."""
    reported: list[Outcome] = []
    calls = 0

    async def crashing(run: Run) -> None:
        nonlocal calls
        calls += 1
        run.claim(always)
        raise RuntimeError("a bug around the handler")

    consumers = Consumers(
        slots=1,
        run_limit=10,
        batch_wait=0.0,
        message_timeout=30.0,
        execute=crashing,
        report=reported.extend,
    )
    commands = deliveries(2)
    for command in commands:
        consumers.push(command)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 0.3
    while loop.time() < deadline:
        if reported and len(reported) % 2 == 0:
            for command in commands:  # the machine's retry, at once: no backoff
                consumers.push(command)
            reported.append(reported[-1])  # keep the count odd until the next report
        await asyncio.sleep(0.005)
    await consumers.close()
    assert (reported[0].delivery_id, reported[0].kind) == (1, FAILED)
    assert "crashed around the handler: RuntimeError" in reported[0].detail
    assert (reported[1].delivery_id, reported[1].kind) == (2, WITHDRAWN)
    assert calls <= 4, calls  # pauses of 0.1, 0.2 s: not thousands of calls
