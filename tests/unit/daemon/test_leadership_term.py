"""A leadership term driven through the in-memory store: delivery and checkpoints, its end
(graceful, or its lease lost), a seek racing a checkpoint write, and rows a running
transaction hides. Operator requests and settings are in test_term_requests.py."""

import asyncio
import dataclasses
import threading
import time

import pytest

from outbox.positions import START, Position
from poller.daemon.term.lease_watch import LeadershipLost
from poller.message import Message
from tests.unit.daemon.term_store_fake import Checkpointed, Event, FakeTermStore, Handled
from tests.unit.daemon.term_support import (
    EVERY_MESSAGE,
    FAST,
    WAIT,
    async_recording,
    checkpoint_only_passes_finished,
    handled,
    recording,
    renewals,
    running_term,
    until,
)


@pytest.mark.parametrize("kind", ["def", "async def"])
async def test_each_key_is_delivered_in_order_and_the_checkpoint_follows(kind: str) -> None:
    store = FakeTermStore({"strategy": "pinned", "consumers": 3, **EVERY_MESSAGE})
    messages = store.append(*["a", "b", "c", "d", None] * 8)
    handler = recording(store.journal) if kind == "def" else async_recording(store.journal)
    async with running_term(store, handler) as term:
        await until(lambda: store.checkpoint == messages[-1].at, "the last message is passed")
        await term.stopped()
    delivered = handled(store.journal)
    assert sorted(delivered) == [m.at for m in messages]  # each once: none failed
    for key in ("a", "b", "c", "d"):
        of_key = [m.at for m in messages if m.partition_key == key]
        assert [at for at in delivered if at in of_key] == of_key
    checkpoint_only_passes_finished(store.journal, messages)


async def test_a_graceful_stop_writes_the_final_checkpoint_and_releases_the_lease() -> None:
    # No checkpoint is due while the term runs: the one written is the stop's.
    store = FakeTermStore({"checkpoint_after": 600.0, "min_checkpoint_count": 1000})
    messages = store.append("a", "b", "c")
    async with running_term(store, recording(store.journal)) as term:
        await until(lambda: len(handled(store.journal)) == 3, "all three are handled")
        assert store.accepted("write_checkpoint") == []
        assert not store.released
        await term.stopped()
        assert not term.term.restart_requested
    assert store.checkpoint == messages[-1].at
    assert store.released


async def test_a_graceful_stop_waits_for_a_call_in_flight_only_while_it_runs() -> None:
    store = FakeTermStore()
    store.append("a")
    started, go_on = threading.Event(), threading.Event()

    def handle(message: Message) -> None:
        started.set()
        go_on.wait(WAIT)
        store.journal.append(Handled(message.at))

    async with running_term(store, handle) as term:
        await until(started.is_set, "a is in flight")
        term.stop.set()
        term.shutdown.set()
        # Private, but nothing else tells that the stop reached its wait for the call.
        await until(lambda: term.term._ending.begun, "the stop began")
        began = time.monotonic()
        go_on.set()
        await term.ended()
        assert time.monotonic() - began < FAST.shutdown_timeout / 2
    assert store.released


async def test_a_lost_lease_ends_the_term_and_nothing_more_is_written() -> None:
    store = FakeTermStore(EVERY_MESSAGE)
    first, held, last = store.append("a", "b", "c")
    started, go_on = threading.Event(), threading.Event()

    def handle(message: Message) -> None:
        if message.at == held.at:
            started.set()
            go_on.wait(WAIT)
        store.journal.append(Handled(message.at))

    async with running_term(store, handle) as term:
        await until(lambda: store.checkpoint == first.at and started.is_set(), "b is in flight")
        store.take_lease_over()
        with pytest.raises(LeadershipLost):
            await term.ended()
        go_on.set()  # b's handler returns after the term ended: its ack must not be written
        assert await term.caller.wait_quiet(asyncio.Event(), WAIT)
    lost = store.calls.index(("renew", False))
    # Reads and the renewer's renewals (refused) may come before the term hears; no write.
    not_writes = ("read_batch", "oldest_hidden_transaction", "renew")
    assert [name for name, _ in store.calls[lost + 1 :] if name not in not_writes] == []
    assert store.checkpoint == first.at
    assert not store.released  # the lease is the new holder's: never released by this term
    assert last.at not in handled(store.journal)


async def test_a_seek_delivers_again_and_a_checkpoint_of_the_old_epoch_never_lands() -> None:
    """A checkpoint asked for before a seek, still queued behind a slow write when the term
    applies the seek, keeps its epoch: stamped with the seek's, it would land and pass
    messages the seek asked to deliver again."""
    store = FakeTermStore(EVERY_MESSAGE)
    [replayed] = store.append("a")
    store.checkpoint = replayed.at  # an earlier term parked it and moved on
    store.park_earlier(replayed, attempts=10, error="timed out")
    store.request_replay()  # delivered first: its unpark is the write the checkpoint waits for
    stream = store.append("b", "c", "d")
    again = asyncio.Event()
    seen: set[Position] = set()

    async def handle(message: Message) -> None:
        if message.at in seen:
            await again.wait()  # held until the writes queued before the seek are done
        seen.add(message.at)
        store.journal.append(Handled(message.at))

    store.hold_writes()
    async with running_term(store, handle) as term:
        await until(
            lambda: len(handled(store.journal)) == 4 and store.writes_waiting == 1,
            "the replay's unpark waits, the stream is handled",
        )
        await renewals(store, 1)  # its checkpoint has been asked for, queued behind the unpark
        store.seek(replayed.at)
        await until(lambda: term.term.machine.epoch == 1, "the term applied the seek")
        store.let_writes_through()
        await until(lambda: epoch_checkpoints(store.journal, 1), "a checkpoint of epoch 1 landed")
        again.set()
        await until(lambda: store.checkpoint == stream[-1].at, "the last is passed again")
        await term.stopped()
    assert handled(store.journal) == [replayed.at] + [m.at for m in stream] * 2
    assert False in store.accepted("write_checkpoint")  # the old epoch's, refused
    assert epoch_checkpoints(store.journal, 0) == []
    checkpoint_only_passes_finished(store.journal, stream, start=replayed.at)


async def test_rows_behind_a_running_transaction_wait_for_its_commit() -> None:
    store = FakeTermStore(EVERY_MESSAGE)
    running = store.open_transaction()
    late = store.append("a", transaction_id=running)
    later = store.append("b")  # committed, but after a transaction still running
    async with running_term(store, recording(store.journal)) as term:
        await renewals(store, 3)
        assert handled(store.journal) == []
        assert store.checkpoint == START
        store.commit(running)
        await until(lambda: store.checkpoint == later[0].at, "both are passed")
        await term.stopped()
    assert handled(store.journal) == [late[0].at, later[0].at]


async def test_only_an_empty_read_asks_whether_rows_are_hidden() -> None:
    store = FakeTermStore(EVERY_MESSAGE)
    store.append("a", "b")

    def reads() -> list[str]:
        asked = ("read_batch", "oldest_hidden_transaction")
        return [name for name, _ in store.calls if name in asked]

    async with running_term(store, recording(store.journal)) as term:
        await until(lambda: len(handled(store.journal)) == 2, "both are handled")
        # The next read waits the poll interval's minimum after one that found messages.
        await until(lambda: len(reads()) >= 3, "a second read and the question")
        await term.stopped()
    # The first read finds both; the second finds nothing, and only then is the question asked.
    assert reads()[:3] == ["read_batch", "read_batch", "oldest_hidden_transaction"]


async def test_a_lease_renewed_after_it_could_run_out_goes_on_when_nobody_took_it() -> None:
    """A renewal answered only after the lease could have run out on the server (a renewer
    that got no turn, a database slow to answer), which finds it still this term's: nobody
    took it (a taking raises the token), so the term goes on from where it was, with the same
    token. Meanwhile it starts nothing. Ending it would have delivered again everything it
    finished since its last checkpoint."""
    options = dataclasses.replace(FAST, lease_seconds=1.2, renew_every=0.4)
    store = FakeTermStore({"checkpoint_after": 600.0, "min_checkpoint_count": 1000})
    before = store.append("a", "b")
    async with running_term(store, recording(store.journal), options) as term:
        await until(lambda: len(handled(store.journal)) == 2, "a and b are handled")
        await renewals(store, 1)
        store.hold_renewals()  # the next one waits for an answer
        fence = term.lease.fence
        await until(lambda: fence.ran_out(time.monotonic()), "the lease could have run out", 5)
        during = store.append("c")
        await asyncio.sleep(10 * options.tick_every)  # c would start now, were it allowed
        assert handled(store.journal) == [m.at for m in before]
        store.let_renewals_through()
        await until(lambda: len(handled(store.journal)) == 3, "c is handled")
        assert not term.task.done()  # the same term
        await term.stopped()
    assert handled(store.journal) == [m.at for m in before + during]  # each once
    assert store.checkpoint == during[-1].at
    assert False not in store.accepted("renew")  # the same token throughout
    assert store.accepted("release") == [True]


def epoch_checkpoints(journal: list[Event], epoch: int) -> list[Checkpointed]:
    return [e for e in journal if isinstance(e, Checkpointed) and e.epoch == epoch]
