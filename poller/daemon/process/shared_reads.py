"""One read for all the shards of a subscription that a process leads.

Each shard's term asks for its next messages (`read`); the asks that meet while a read runs
are answered together by the next one: a single keyset read of the publication from the
lowest start among them, filtered to their shards (read_shards_batch), split by shard. So a
process leading 16 shards walks the delivery-order index about once per wake-up, not 16
times, each read passing over the other shards' rows, on one connection, not 16. Leases,
fencing tokens, checkpoints and the state machines stay per shard.

What a read learns stays true: below the safe frontier no row appears any more, so "shard S
has no message in (a, b]" holds for good (retention only removes rows). The reader keeps that
interval per shard and starts the shard's next ask after it: a shard whose messages are rare
is not read again over the same stretch of the others' rows, and a read cut short by its row
limit (`full`) still moves every shard it served past what it covered.
"""

import asyncio
import logging
from collections import defaultdict
from dataclasses import dataclass, field

from outbox.positions import Position
from poller.daemon.process.shared_connection import SharedConnection
from poller.membership import ShardUnit
from poller.message import Message
from poller.store.retired_positions import RetiredPositionError, check_not_retired
from poller.store.shard_reads import ShardRead, ShardsBatch, read_shards_batch

log = logging.getLogger(__name__)

MOST_ROWS = 10_000
"""The most rows one shared read returns, whatever its shards ask for in all."""


@dataclass(eq=False)
class _Ask:
    publication: str
    unit: ShardUnit
    after: Position
    until: Position
    limit: int
    answer: "asyncio.Future[ShardRead]" = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )


class SharedShardReads:
    def __init__(
        self,
        connection: SharedConnection,
        stop: asyncio.Event,
        most_rows: int = MOST_ROWS,
    ) -> None:
        self._connection = connection
        self._stop = stop
        self._most_rows = most_rows
        self._asks: list[_Ask] = []
        self._serving: asyncio.Task[None] | None = None
        # Per shard, (a, b]: a stretch of the publication with no message of that shard.
        self._nothing_of: dict[ShardUnit, tuple[Position, Position]] = {}
        self.reads = 0
        """Shared reads run so far (for tests and the bench: asks answered per read)."""

    async def read(
        self, publication: str, unit: ShardUnit, after: Position, until: Position, limit: int
    ) -> ShardRead:
        """Up to `limit` messages of `unit` after `after` (no further than `until`). Raises
        what the read raised (a lost connection: the term ends as for its own), and
        RetiredPositionError when retention retired messages after `after`."""
        ask = _Ask(publication, unit, after, until, limit)
        self._asks.append(ask)
        if self._serving is None or self._serving.done():
            self._serving = asyncio.create_task(self._serve(), name="shared reads")
        return await ask.answer  # cancelled: the future is too, and the read passes it over

    async def close(self) -> None:
        """Cancel a read in progress (the subscription stops); its asks are cancelled."""
        if self._serving is not None:
            self._serving.cancel()
            await asyncio.gather(self._serving, return_exceptions=True)

    async def _serve(self) -> None:
        while asks := [ask for ask in self._asks if not ask.answer.done()]:
            # One turn of the loop first: the shards woken with the first ask ask too.
            await asyncio.sleep(0)
            asks = [ask for ask in self._asks if not ask.answer.done()]
            self._asks = []
            groups: dict[tuple[str, int, Position], list[_Ask]] = defaultdict(list)
            for ask in asks:
                groups[ask.publication, ask.unit.shard_count, ask.until].append(ask)
            for group in groups.values():
                try:
                    self._asks.extend(await self._read_for(group))
                except BaseException as error:
                    for ask in group:
                        if not ask.answer.done():
                            ask.answer.set_exception(error)
                    if isinstance(error, asyncio.CancelledError):
                        for ask in self._asks:
                            ask.answer.cancel()
                        raise
                    if not isinstance(error, Exception):
                        raise

    async def _read_for(self, asks: list[_Ask]) -> list[_Ask]:
        """One read for asks of one publication, shard count and bound; returns those it did
        not reach."""
        starts = {ask: self._start_of(ask) for ask in asks}
        start = min(starts.values())
        limit = min(sum(ask.limit for ask in asks), self._most_rows)
        conn = await self._connection.get(self._stop)
        batch = await read_shards_batch(
            conn,
            asks[0].publication,
            asks[0].unit.shard_count,
            sorted({ask.unit.shard for ask in asks}),
            start,
            asks[0].until,
            limit,
        )
        self.reads += 1
        full = len(batch.messages) >= limit
        end = batch.messages[-1][1].at if full else batch.last_safe
        by_shard: dict[int, list[Message]] = defaultdict(list)
        for shard, message in batch.messages:
            by_shard[shard].append(message)
        unreached = []
        for ask in asks:
            if ask.answer.done():
                continue  # given up on while the read ran
            ask_start = starts[ask]
            if end is not None and full and ask_start >= end:
                unreached.append(ask)  # the row limit cut the read before this shard's start
                continue
            self._answer(ask, ask_start, batch, by_shard[ask.unit.shard], end, full)
        return unreached

    def _answer(
        self,
        ask: _Ask,
        start: Position,
        batch: ShardsBatch,
        read: list[Message],
        end: Position | None,
        full: bool,
    ) -> None:
        if batch.retired_up_to is not None:
            mark = batch.retired_up_to
            try:
                check_not_retired(ask.publication, ask.after, mark.transaction_id, mark.position)
            except RetiredPositionError as error:
                ask.answer.set_exception(error)
                return
        own = [message for message in read if message.at > start]
        taken = own[: ask.limit]
        complete = len(own) <= ask.limit
        if complete and end is not None:
            self._nothing_between(ask.unit, taken[-1].at if taken else start, end)
        ask.answer.set_result(ShardRead(taken, end, batch.oldest_hidden, full and complete))

    def _start_of(self, ask: _Ask) -> Position:
        known = self._nothing_of.get(ask.unit)
        if known is not None and known[0] <= ask.after < known[1]:
            return known[1]
        return ask.after

    def _nothing_between(self, unit: ShardUnit, after: Position, end: Position) -> None:
        if end <= after:
            return
        known = self._nothing_of.get(unit)
        if known is not None and known[0] <= after <= known[1]:
            after = known[0]  # it continues the stretch already known
        self._nothing_of[unit] = (after, end)
