"""What a running term takes from the store besides messages: a handler's failures parked
per the settings, an operator's replay and skip requests, and settings changes."""

import asyncio

import pytest

from poller.message import Message
from tests.unit.daemon.term_store_fake import FakeTermStore, Handled, Parked, Unparked
from tests.unit.daemon.term_support import (
    EVERY_MESSAGE,
    async_recording,
    checkpoint_only_passes_finished,
    handled,
    recording,
    renewals,
    running_term,
    until,
)


@pytest.mark.parametrize("kind", ["def", "async def"])
async def test_a_failing_message_is_retried_then_parked_and_passed(kind: str) -> None:
    store = FakeTermStore(
        {
            "max_retry_count": 3,
            "retry_backoff_initial": 0.001,
            "retry_backoff_max": 0.002,
            **EVERY_MESSAGE,
        }
    )
    messages = store.append("a", "poison", "b")
    attempts: list[int] = []

    def handle(message: Message) -> None:
        if message.partition_key == "poison":
            attempts.append(message.delivery_attempt)
            raise ValueError("no such customer")
        store.journal.append(Handled(message.at))

    async def handle_async(message: Message) -> None:
        handle(message)

    async with running_term(store, handle if kind == "def" else handle_async) as term:
        await until(lambda: store.checkpoint == messages[-1].at, "the last message is passed")
        await term.stopped()
    poison = messages[1]
    assert attempts == [1, 2, 3]
    assert [e for e in store.journal if isinstance(e, Parked)] == [Parked(poison.at, 3)]
    assert store.parked[poison.position].attempts == 3
    assert "no such customer" in store.parked[poison.position].last_error
    assert handled(store.journal) == [messages[0].at, messages[2].at]
    checkpoint_only_passes_finished(store.journal, messages)


async def test_a_replay_request_delivers_a_parked_message_once_and_unparks_it() -> None:
    store = FakeTermStore(EVERY_MESSAGE)
    [parked] = store.append("a")
    store.park_earlier(parked, attempts=10, error="timed out")
    store.checkpoint = parked.at  # an earlier term parked it and moved on
    async with running_term(store, recording(store.journal)) as term:
        await renewals(store, 3)
        assert handled(store.journal) == []  # parked, and no replay asked for
        store.hold_writes()  # its row outlives the replay's end by a few renewals
        store.request_replay()
        await until(lambda: store.writes_waiting == 1, "the replay's unpark waits")
        await renewals(store, 2)  # each reads the marked rows again, this one among them
        store.let_writes_through()
        await until(lambda: not store.parked, "the replayed row is deleted")
        await renewals(store, 2)
        await term.stopped()
    assert handled(store.journal) == [parked.at]
    assert [e for e in store.journal if isinstance(e, Unparked)] == [Unparked(parked.at)]


async def test_a_skip_request_finishes_the_messages_up_to_it_without_delivering_them() -> None:
    store = FakeTermStore(EVERY_MESSAGE)  # one consumer, one in flight: in order, one by one
    messages = store.append("a", "b", "c", "d", "e")
    started, go_on = asyncio.Event(), asyncio.Event()

    async def handle(message: Message) -> None:
        if message.at == messages[0].at:
            started.set()
            await go_on.wait()  # the rest waits behind it, in the buffer
        store.journal.append(Handled(message.at))

    async with running_term(store, handle) as term:
        await until(started.is_set, "a is in flight")
        store.request_skip(messages[3].at)
        await renewals(store, 2)  # the first has applied it by the time the second is sent
        go_on.set()
        await until(lambda: store.checkpoint == messages[-1].at, "the last message is passed")
        await until(lambda: store.skip_request is None, "the skip request is settled")
        await term.stopped()
    # a had started: it ran to its end; b, c and d were finished without a call.
    assert handled(store.journal) == [messages[0].at, messages[4].at]


async def test_a_change_of_settings_ends_the_term_for_a_new_one() -> None:
    store = FakeTermStore(EVERY_MESSAGE)
    messages = store.append("a", "b")
    async with running_term(store, async_recording(store.journal)) as term:
        await until(lambda: store.checkpoint == messages[-1].at, "both are passed")
        store.update_settings(max_retry_count=5)
        await term.ended()
        assert term.term.restart_requested
    assert store.released


async def test_a_change_of_the_consumer_count_alone_goes_on_in_the_same_term() -> None:
    store = FakeTermStore(EVERY_MESSAGE)
    first = store.append("a", "b")
    async with running_term(store, async_recording(store.journal)) as term:
        await until(lambda: store.checkpoint == first[-1].at, "both are passed")
        store.update_settings(consumers=3)
        await until(lambda: term.term.machine.consumers == 3, "three consumers")
        second = store.append("c", "d", "e")
        await until(lambda: store.checkpoint == second[-1].at, "the new ones are passed")
        assert not term.task.done()
        await term.stopped()
        assert not term.term.restart_requested
    assert sorted(handled(store.journal)) == [m.at for m in first + second]
