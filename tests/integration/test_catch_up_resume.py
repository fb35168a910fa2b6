"""Every checkpoint is safe to resume from, while 16 writers commit out of order around it:
subscribing again from it yields exactly the messages after it."""

import asyncio
import threading
from collections.abc import AsyncGenerator

import poller
from outbox_cli.demo.workload import WorkloadShape, WriterTally, run_writers
from poller.catch_up.stream import Item

PUBLICATION = "orders"
SHAPE = WorkloadShape(writers=16, transactions_per_writer=20, max_commit_delay=0.02, seed=12)


class Writers(threading.Thread):
    """The demo's out-of-order writers, run once in the background."""

    def __init__(self, url: str) -> None:
        super().__init__(name="out-of-order-writers")
        self.url = url
        self.tally: WriterTally | None = None

    def run(self) -> None:
        self.tally = run_writers(self.url, PUBLICATION, SHAPE)


async def read_while_writing(items: AsyncGenerator[Item], writers: Writers) -> list[Item]:
    """Every item until the writers finished and each message they committed arrived."""
    received: list[Item] = []
    seen: set[int] = set()
    while writers.tally is None or not seen >= writers.tally.committed:
        try:
            item = await asyncio.wait_for(anext(items), 10)
        except TimeoutError:
            break  # a message never arrived: the assertions say which
        received.append(item)
        if isinstance(item, poller.Message):
            seen.add(item.position)
    return received


async def messages_after(url: str, checkpoint: poller.Checkpoint) -> list[int]:
    """The positions a new subscription from `checkpoint` yields before CaughtUp."""
    positions = []
    items = poller.subscribe(url, PUBLICATION, start=checkpoint)
    async for item in items:
        if isinstance(item, poller.CaughtUp):
            break
        assert isinstance(item, poller.Message)
        positions.append(item.position)
    await items.aclose()
    return positions


async def test_resubscribing_from_each_checkpoint_yields_exactly_the_messages_after_it(
    database_url: str,
) -> None:
    items = poller.subscribe(
        database_url, PUBLICATION, checkpoint_interval=7, checkpoint_timeout=0.02
    )
    assert await anext(items) == poller.CaughtUp()
    writers = Writers(database_url)
    writers.start()
    received = await read_while_writing(items, writers)
    await items.aclose()
    writers.join()
    assert writers.tally is not None

    delivered = [item.position for item in received if isinstance(item, poller.Message)]
    assert sorted(delivered) == sorted(writers.tally.committed)  # each once, none rolled back
    checkpoints = [item for item in received if isinstance(item, poller.Checkpoint)]
    # One every 7 messages at least (more in the pauses between bursts of commits); reading
    # stopped at the last message, before the checkpoint that may follow it.
    assert len(checkpoints) >= (len(delivered) - 1) // 7
    for index, item in enumerate(received):
        if isinstance(item, poller.Checkpoint):
            expected = [m.position for m in received[index:] if isinstance(m, poller.Message)]
            assert await messages_after(database_url, item) == expected, item
