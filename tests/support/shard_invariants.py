"""What must hold of a sharded subscription's deliveries, across every process that led a
shard, whatever faults and hand-overs it went through.

The consumer-group rules (tests.support.delivery_invariants) follow one leader at a time, each
resuming once from one checkpoint. Here a key's shard moves between processes (a join, a
leave, a kill, a cut session) and between layouts (a change of the shard count), and one
process may lead the same shard in several terms. So these rules are about each key, on the
machine-wide monotonic clock every handler recorded (tests.support.keyed_handler):

- order: a delivery of a key's message starts only once the key's previous message was
  finished (acked, or failed its last allowed attempt, which parks it), in whatever process;
  going back to deliver again after a kill is allowed, going ahead of an unfinished one is not;
- one at a time: no two deliveries of a key overlap, in any processes; a killed process's
  unfinished handler counts as running until the process was reaped;
- checkpoints: a shard's checkpoint moves only forward, only by its lease's holder, and never
  past a message of that shard that was not finished yet; the floor likewise over all.
"""

import bisect
import itertools
import math
from collections import defaultdict
from collections.abc import Collection, Iterable

from outbox.positions import Position
from outbox.shards import message_shard
from tests.support.keyed_handler import Delivery
from tests.support.shards import ShardCheckpointChange
from tests.support.stored import Committed, SubscriptionChange


def first_finished(
    rows: Iterable[Delivery], parked: Collection[int], max_retry_count: int
) -> dict[int, float]:
    """Position -> the monotonic time its first ack, or the failure of its last allowed
    attempt (a parked message's), ended."""
    done: dict[int, float] = {}
    for row in rows:
        if row.finished_monotonic is None:
            continue
        last_failure = row.outcome == "fail" and row.delivery_attempt == max_retry_count
        if row.outcome == "ack" or (last_failure and row.position in parked):
            done[row.position] = min(done.get(row.position, math.inf), row.finished_monotonic)
    return done


def check_key_order(
    rows: list[Delivery],
    messages: list[Committed],
    parked: Collection[int],
    max_retry_count: int,
) -> None:
    """Every delivery of a key's message started after the key's previous message was
    finished somewhere: per-key order across processes, shards and layouts."""
    done = first_finished(rows, parked, max_retry_count)
    by_key: dict[str, list[int]] = defaultdict(list)
    for message in messages:
        if message.key is not None:
            by_key[message.key].append(message.at.position)
    previous = {
        later: earlier
        for positions in by_key.values()
        for earlier, later in itertools.pairwise(positions)
    }
    for row in rows:
        earlier = previous.get(row.position)
        if earlier is None:
            continue
        finished = done.get(earlier, math.inf)
        assert finished <= row.started_monotonic, (
            f"key {row.partition_key}: {row} started at {row.started_monotonic:.4f}, before the"
            f" key's previous message {earlier} was finished (at {finished})"
        )


def check_one_handler_per_key(
    rows: list[Delivery], deaths: dict[int, float], exempt: Collection[int] = ()
) -> None:
    """No two deliveries of a key ran at once, anywhere. `deaths`: pid -> monotonic time a
    killed process was reaped (its unfinished handlers ran until then). `exempt`: ids of
    deliveries left out, with the reason at the caller."""
    by_key: dict[str, list[Delivery]] = defaultdict(list)
    for row in rows:
        if row.partition_key is not None and row.id not in exempt:
            by_key[row.partition_key].append(row)
    for key, deliveries in by_key.items():
        deliveries.sort(key=lambda row: row.started_monotonic)
        busy_until, busy_with = -math.inf, None
        for row in deliveries:
            assert row.started_monotonic >= busy_until, (
                f"key {key}: pid {row.pid} started {row} at {row.started_monotonic:.4f} while"
                f" {busy_with} ran until {busy_until:.4f}"
            )
            end = row.finished_monotonic
            if end is None:
                end = deaths.get(row.pid)
            assert end is not None, f"{row} never finished, in a process that was not killed"
            if end > busy_until:
                busy_until, busy_with = end, row


def finished_by_clock(rows: Iterable[Delivery], parked_at: dict[int, float]) -> dict[int, float]:
    """Position -> when it was first acked (the handler's time.time()) or parked (the parked
    row's time): the wall clock the database's change records are on."""
    done = dict(parked_at)
    for row in rows:
        if row.outcome == "ack" and row.finished_at is not None:
            done[row.position] = min(done.get(row.position, math.inf), row.finished_at)
    return done


class _FinishedPrefix:
    """Messages in delivery order, and for each prefix when all of it was finished."""

    def __init__(self, order: list[Position], done: dict[int, float]) -> None:
        self.order = order
        self.done_by = list(
            itertools.accumulate((done.get(at.position, math.inf) for at in order), max)
        )

    def finished_by(self, upto: Position) -> float:
        covered = bisect.bisect_right(self.order, upto)
        return self.done_by[covered - 1] if covered else -math.inf


def check_shard_checkpoints(
    changes: list[ShardCheckpointChange],
    rows: list[Delivery],
    messages: list[Committed],
    parked_at: dict[int, float],
    ends: dict[int, Position],
) -> None:
    """Every move of a shard's checkpoint went forward, was made by the session holding the
    shard's lease, and passed only messages of that shard finished by then. `ends`: shard
    count -> the barrier of the change that replaced that layout (its shards own no message
    after it)."""
    done = finished_by_clock(rows, parked_at)
    prefixes: dict[tuple[int, int], _FinishedPrefix] = {}
    moves = [change for change in changes if change.old is not None]
    assert moves, "no shard checkpoint ever moved"
    for change in moves:
        unit = (change.shard_count, change.shard)
        where = f"shard {change.shard} of {change.shard_count}: {change}"
        assert change.old is not None
        assert change.old <= change.new, f"moved back: {where}"
        if not change.by_daemon:
            continue
        assert change.by_lease_holder, f"written by a session that does not hold it: {where}"
        if unit not in prefixes:
            end = ends.get(change.shard_count, Position(2**63 - 1, 2**63 - 1))
            order = [
                m.at
                for m in messages
                if m.at <= end
                and message_shard(m.key, m.at.position, change.shard_count) == unit[1]
            ]
            prefixes[unit] = _FinishedPrefix(order, done)
        finished = prefixes[unit].finished_by(change.new)
        assert finished <= change.changed_at.timestamp(), (
            f"passed a message of its shard that was not finished yet: {where}"
        )


def check_floor(
    changes: list[SubscriptionChange],
    rows: list[Delivery],
    messages: list[Committed],
    parked_at: dict[int, float],
) -> None:
    """The subscription's floor checkpoint never moved back, and never passed a message that
    was not finished yet (retention and `outbox status` read it)."""
    floors = [change.checkpoint for change in changes]
    assert floors == sorted(floors), f"the floor moved back: {floors}"
    prefix = _FinishedPrefix([m.at for m in messages], finished_by_clock(rows, parked_at))
    for change in changes:
        assert prefix.finished_by(change.checkpoint) <= change.changed_at.timestamp(), (
            f"the floor passed a message that was not finished yet: {change}"
        )
