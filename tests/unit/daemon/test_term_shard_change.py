"""A leadership term through a change of its subscription's shard count, over the in-memory
store: a term whose shard starts draining delivers on and restarts only once it has finished
everything it read; one whose shard leaves the layout ends at once. (The database holds a
draining shard's reads and checkpoints at the barrier: tests/integration/
test_shard_change_barrier.py. The fake reads on; the test appends nothing after the change.)"""

import threading

from poller.membership import Layout
from poller.message import Message
from poller.subscription.key_queues import owner_of
from tests.unit.daemon.term_store_fake import FakeTermStore, Handled
from tests.unit.daemon.term_support import (
    EVERY_MESSAGE,
    WAIT,
    handled,
    renewals,
    running_term,
    until,
)


async def test_a_term_whose_shard_starts_draining_restarts_once_it_finished_all_it_read() -> None:
    """Restarting at the renewal that showed the change handed back what had not started (key
    a's second message, behind its running call) while key d's later messages had finished:
    the checkpoint stayed before a's second message, and the successor delivered d's again."""
    assert owner_of("a", 2) != owner_of("d", 2)
    store = FakeTermStore({"strategy": "pinned", "consumers": 2, **EVERY_MESSAGE})
    messages = store.append("a", "a", "d", "d", "d")
    started, go_on = threading.Event(), threading.Event()

    def handle(message: Message) -> None:
        if message.at == messages[0].at:
            started.set()
            go_on.wait(WAIT)
        store.journal.append(Handled(message.at))

    async with running_term(store, handle) as term:
        await until(
            lambda: started.is_set() and len(handled(store.journal)) == 3,
            "d's messages handled while a's first runs",
        )
        store.layout = Layout(3, draining_shard_count=1, barrier=messages[-1].at)
        await renewals(store, 3)
        assert not term.term.restart_requested  # a's first still runs, a's second waits
        go_on.set()
        await term.ended()
        assert term.term.restart_requested
    assert sorted(handled(store.journal)) == [m.at for m in messages]  # each once
    assert store.checkpoint == messages[-1].at  # the successor starts after them all
    assert store.released


async def test_a_term_whose_shard_leaves_the_layout_ends_at_once() -> None:
    store = FakeTermStore(EVERY_MESSAGE)
    messages = store.append("a", "b")
    async with running_term(store, lambda message: store.journal.append(Handled(message.at))) as (
        term
    ):
        await until(lambda: store.checkpoint == messages[-1].at, "both handled")
        store.layout = Layout(2)  # a change from one shard ended: its shard is not in it
        await term.ended()
        assert term.term.restart_requested
    assert store.released
