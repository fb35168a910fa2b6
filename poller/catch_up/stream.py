"""The reading loop behind `subscribe`: snapshot-safe batches from a start position, CaughtUp
once the backlog is read, then live messages and checkpoint signals.

Reads go through the daemon's snapshot-safe read (poller.store.message_reads): only rows below
the oldest transaction still running, in (transaction_id, position) order, so a transaction
that commits late is waited for, never skipped, and every checkpoint is safe to resume from.
"""

import logging
import time
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass

from outbox.positions import START, Position, at_frontier
from poller.catch_up.checkpoint_signals import CheckpointSignals
from poller.catch_up.reads import Reads
from poller.catch_up.signals import CaughtUp, Checkpoint
from poller.catch_up.wake_ups import WakeUps
from poller.message import Message
from poller.subscription.settings import READ_BATCH_SIZE

log = logging.getLogger(__name__)

# Rows per read: large enough that catching up is a few round trips per thousand messages,
# small enough that one read's rows stay a small part of memory (the daemon's default read).
BATCH_SIZE = READ_BATCH_SIZE

# Longest wait between two reads in the live phase when no NOTIFY arrives (writers that do
# not opt into notify=True): an empty read costs about 0.06 ms in the database.
POLL_INTERVAL = 0.05

Item = Message | CaughtUp | Checkpoint


@dataclass(frozen=True)
class Filter:
    """Which messages the caller wants; the others are read and skipped (they still move the
    checkpoint position)."""

    message_types: frozenset[str] | None = None
    partition_key: str | None = None

    def matches(self, message: Message) -> bool:
        if self.message_types is not None and message.message_type not in self.message_types:
            return False
        return self.partition_key is None or message.partition_key == self.partition_key


@dataclass(frozen=True)
class Plan:
    """Everything `subscribe` checked before any connection is opened."""

    url: str
    publication: str
    start: str | Checkpoint
    filter: Filter
    checkpoint_interval: int
    checkpoint_timeout: float


async def stream(plan: Plan, clock: Callable[[], float] = time.monotonic) -> AsyncGenerator[Item]:
    """The subscription's items one by one (`subscribe`)."""
    async for page in pages(plan, clock):
        for item in page:
            yield item


async def pages(
    plan: Plan, clock: Callable[[], float] = time.monotonic
) -> AsyncGenerator[list[Item]]:
    """The items of each read at once, in order (never an empty list): `subscribe_sync` hops
    to its caller's thread once a page, not once an item (a hop per item, a task and two
    thread switches, held it to 14k messages a second where this loop reads 250k). A page is
    no more than one read's rows, read when the caller has taken the page before it."""
    signals = CheckpointSignals(plan.checkpoint_interval, plan.checkpoint_timeout)
    async with Reads(plan.url) as reads, WakeUps(plan.url, plan.publication) as wake_ups:
        frontier, next_id, running = await reads.snapshot()
        # Every transaction that committed before now is below this: the backlog.
        end = backlog_end(next_id, running)
        after = await _start_position(reads, plan, frontier)
        live = False
        while True:
            page: list[Item] = []
            if not live and frontier < end:
                # Taken before the read, so the read sees at least this far.
                frontier = await reads.safe_frontier()
            batch = await reads.batch(plan.publication, after, BATCH_SIZE)
            for message in batch:
                # A row is read only once every transaction below it has ended, and rows
                # come in transaction order: everything below `end` has been read before it.
                if not live and message.transaction_id >= end:
                    live = True
                    signals.caught_up()
                    page.append(CaughtUp())
                after = message.at
                delivered = plan.filter.matches(message)
                if delivered:
                    page.append(message)
                checkpoint = signals.scanned(after, delivered=delivered, now=clock())
                if checkpoint is not None:
                    page.append(checkpoint)
            if len(batch) < BATCH_SIZE:
                if not live and frontier >= end:
                    # A short read reached a frontier past every transaction of the backlog.
                    live = True
                    signals.caught_up()
                    page.append(CaughtUp())
                checkpoint = signals.idle(clock())
                if checkpoint is not None:
                    page.append(checkpoint)
            if page:
                yield page
            if len(batch) == BATCH_SIZE:
                continue
            deadline = signals.deadline()
            wait = POLL_INTERVAL if deadline is None else min(POLL_INTERVAL, deadline - clock())
            await wake_ups.wait(max(wait, 0.0))


def backlog_end(next_id: int, running: list[int]) -> int:
    """The frontier a read must reach to have read every row committed before a snapshot
    whose next transaction id is `next_id` and whose running ids are `running`: one past the
    newest id below `next_id` that is not running. The newest ids that are still running are
    left out, so CaughtUp does not wait for them; an older one that is running is waited for
    anyway, since the rows committed above it are read only once it ends."""
    end = next_id
    still_running = set(running)
    while end - 1 in still_running:
        end -= 1
    return end


async def _start_position(reads: Reads, plan: Plan, frontier: int) -> Position:
    start = plan.start
    if isinstance(start, Checkpoint):
        next_id = await reads.next_transaction_id()
        if start.transaction_id >= next_id:
            # Every transaction from now on gets an id below it: nothing new would be read.
            raise ValueError(
                f"start={start!r}: transaction {start.transaction_id} has not happened yet"
                f" (the next transaction id is {next_id}); is it a checkpoint of another cluster?"
            )
        return start.at
    if start == "end":
        return at_frontier(frontier)
    floor = await reads.history_floor(plan.publication)
    if floor is None:
        return START
    # "start" is the oldest message still readable (in the table, or in the publication's
    # archive); a consumer that meant to resume (one that had not stored a position yet)
    # learns here what it will not see.
    log.warning(
        "publication %r: messages up to %s were retired by retention; start is after them",
        plan.publication,
        floor,
    )
    return floor
