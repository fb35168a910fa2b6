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

A read also carries the process's other shards of the same count along ("riders"): each shard
that asked before is expected to ask next after what it was given, and a read that starts at
or before that place keeps the shard's messages there for it (`_Ahead`). Its term, woken by
the read's news of new safe messages (other_shards.py), gets them without a round trip of its
own: the shards of a process wake, read and deliver together, as one reader of them all does.
"""

import asyncio
import logging
from collections import defaultdict
from dataclasses import dataclass, field
from typing import NamedTuple

from outbox.positions import Position
from outbox.read_servers import ReadProof
from poller.daemon.process.shared_connection import SharedConnection
from poller.membership import ShardUnit
from poller.message import Message
from poller.store.retired_positions import RetiredPositionError, check_not_retired
from poller.store.shard_reads import ShardRead, ShardsBatch, read_shards_batch

log = logging.getLogger(__name__)

MOST_ROWS = 10_000
"""The most rows one shared read returns, whatever its shards ask for in all."""


class _Expected(NamedTuple):
    """Where a shard's next ask is expected to start (after what it was last given)."""

    publication: str
    after: Position
    limit: int
    proof: ReadProof | None


class _Ahead(NamedTuple):
    """A shard's messages read before it asked: every one after `read_from` up to `end`; it
    has none in (`after`, `read_from`], so an ask from anywhere there gets these."""

    after: Position
    read_from: Position
    messages: list[Message]
    end: Position | None
    oldest_hidden: int | None
    proof: ReadProof | None


@dataclass(eq=False)
class _Ask:
    publication: str
    unit: ShardUnit
    after: Position
    limit: int
    proof: ReadProof | None
    answer: "asyncio.Future[ShardRead]" = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )


class SharedShardReads:
    def __init__(
        self,
        connection: SharedConnection,
        stop: asyncio.Event,
        subscription: str,
        most_rows: int = MOST_ROWS,
    ) -> None:
        self._connection = connection
        self._subscription = subscription
        self._stop = stop
        self._most_rows = most_rows
        self._asks: list[_Ask] = []
        self._serving: asyncio.Task[None] | None = None
        # Per shard, (a, b]: a stretch of the publication with no message of that shard.
        self._nothing_of: dict[ShardUnit, tuple[Position, Position]] = {}
        self._expected: dict[ShardUnit, _Expected] = {}
        self._ahead: dict[ShardUnit, _Ahead] = {}
        self.reads = 0
        """Shared reads run so far (for tests and the bench: asks answered per read)."""

    async def read(
        self,
        publication: str,
        unit: ShardUnit,
        after: Position,
        limit: int,
        proof: ReadProof | None,
    ) -> ShardRead:
        """Up to `limit` messages of `unit` after `after` (no further than the database lets
        its shard count read: a draining count's barrier), read on a server that passes
        `proof` (None: the database itself). Raises what the read raised (a lost connection:
        the term ends as for its own; ReadServerRefusedError when the server failed the
        proof), and RetiredPositionError when retention retired messages after `after`."""
        ahead = self._ahead.pop(unit, None)
        if (
            ahead is not None
            and limit > 0
            and ahead.proof == proof
            and ahead.after <= after <= ahead.read_from
        ):
            return self._from_ahead(publication, unit, ahead, limit)
        ask = _Ask(publication, unit, after, limit, proof)
        self._asks.append(ask)
        if self._serving is None or self._serving.done():
            self._serving = asyncio.create_task(self._serve(), name="shared reads")
        return await ask.answer  # cancelled: the future is too, and the read passes it over

    def forget(self, unit: ShardUnit) -> None:
        """The shard's term ended here: reads stop carrying it along."""
        self._expected.pop(unit, None)
        self._ahead.pop(unit, None)

    def _from_ahead(
        self, publication: str, unit: ShardUnit, ahead: _Ahead, limit: int
    ) -> ShardRead:
        taken, rest = ahead.messages[:limit], ahead.messages[limit:]
        if rest:
            self._ahead[unit] = ahead._replace(
                after=taken[-1].at, read_from=taken[-1].at, messages=rest
            )
        self._expected[unit] = _Expected(publication, taken[-1].at, limit, ahead.proof)
        return ShardRead(taken, ahead.end, ahead.oldest_hidden, False)

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
            groups: dict[tuple[str, int, ReadProof | None], list[_Ask]] = defaultdict(list)
            for ask in asks:
                groups[ask.publication, ask.unit.shard_count, ask.proof].append(ask)
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
        """One read for asks of one publication, shard count and proof (and the riders
        it can carry); returns the asks it did not reach."""
        first = asks[0]
        starts = {ask: self._start_of(ask.unit, ask.after) for ask in asks}
        start = min(starts.values())
        riders = self._riders(first, asks, start)
        wanted = sum(ask.limit for ask in asks) + sum(e.limit for _, e, _ in riders)
        limit = min(wanted, self._most_rows)
        conn = await self._connection.get(self._stop)
        shards = {ask.unit.shard for ask in asks} | {unit.shard for unit, _, _ in riders}
        batch = await read_shards_batch(
            conn,
            self._subscription,
            first.publication,
            first.unit.shard_count,
            sorted(shards),
            start,
            limit,
            first.proof,
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
        for unit, expected, read_from in riders:
            if end is not None and (not full or read_from < end):
                self._keep_ahead(unit, expected, read_from, batch, by_shard[unit.shard], end)
        return unreached

    def _riders(
        self, first: _Ask, asks: list[_Ask], start: Position
    ) -> list[tuple[ShardUnit, _Expected, Position]]:
        """The process's other shards of the same count this read can carry: those expected
        to ask next at or after its start (under the same proof), with nothing kept for them
        yet."""
        asking = {ask.unit for ask in asks}
        riders = []
        for unit, expected in self._expected.items():
            if (
                unit in asking
                or unit in self._ahead
                or unit.shard_count != first.unit.shard_count
                or expected.publication != first.publication
                or expected.proof != first.proof
            ):
                continue
            read_from = self._start_of(unit, expected.after)
            if read_from >= start:
                riders.append((unit, expected, read_from))
        return riders

    def _keep_ahead(
        self,
        unit: ShardUnit,
        expected: _Expected,
        read_from: Position,
        batch: ShardsBatch,
        read: list[Message],
        end: Position,
    ) -> None:
        mark = batch.retired_up_to
        if mark is not None and expected.after < mark:
            return  # its own ask will be refused, loudly
        own = [message for message in read if message.at > read_from]
        if own:
            self._ahead[unit] = _Ahead(
                expected.after,
                read_from,
                own,
                end,
                batch.oldest_hidden,
                expected.proof,
            )
        else:
            self._nothing_between(unit, read_from, end)

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
        next_after = taken[-1].at if taken else ask.after
        self._expected[ask.unit] = _Expected(ask.publication, next_after, ask.limit, ask.proof)
        ask.answer.set_result(ShardRead(taken, end, batch.oldest_hidden, full and complete))

    def _start_of(self, unit: ShardUnit, after: Position) -> Position:
        known = self._nothing_of.get(unit)
        if known is not None and known[0] <= after < known[1]:
            return known[1]
        return after

    def _nothing_between(self, unit: ShardUnit, after: Position, end: Position) -> None:
        if end <= after:
            return
        known = self._nothing_of.get(unit)
        if known is not None and known[0] <= after <= known[1]:
            after = known[0]  # it continues the stretch already known
        self._nothing_of[unit] = (after, end)
