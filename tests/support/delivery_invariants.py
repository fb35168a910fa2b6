"""What must hold of a consumer group's deliveries, whatever faults it went through.

Each check reads what the keyed handler recorded (tests.support.keyed_handler: one row per
attempt, with start and end times), what the outbox holds (tests.support.stored) and, for the
checkpoint, samples of it over time (tests.support.samplers), and fails naming the first
delivery that breaks the rule: nothing lost, attempts in order, a sound checkpoint, leaders
resuming from it, and under pinned one delivery per key in flight, in per-key order.
"""

import bisect
import itertools
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from tests.support.daemons import Daemon
from tests.support.keyed_handler import Delivery, fails
from tests.support.samplers import CheckpointSample
from tests.support.stored import Committed
from tests.support.writers import Written

Position = tuple[int, int]  # (transaction_id, position), as outbox.positions.Position


def timestamp(value: Any) -> float:
    return float(value.timestamp())


def expected_parked(positions: Iterable[int], max_retry_count: int) -> set[int]:
    """Messages whose every allowed attempt fails: they must be parked, all others acked."""
    return {
        position
        for position in positions
        if all(fails(position, attempt) for attempt in range(1, max_retry_count + 1))
    }


def check_nothing_lost(
    rows: list[Delivery],
    messages: list[Committed],
    written: Written,
    parked: dict[int, float],
    max_retry_count: int,
) -> None:
    """Every committed message was acked or parked (parked exactly when every allowed attempt
    failed), nothing else was delivered, and the writers and the table agree."""
    committed = {m.at[1] for m in messages}
    assert committed == written.committed, "outbox.messages and the writers disagree"
    delivered = {row.position for row in rows}
    acked = {row.position for row in rows if row.outcome == "ack"}
    assert delivered <= committed, f"invented: {sorted(delivered - committed)[:10]}"
    assert not delivered & written.rolled_back, "a rolled-back message was delivered"
    lost = committed - acked - set(parked)
    assert not lost, f"{len(lost)} committed messages neither acked nor parked: {sorted(lost)[:10]}"
    assert set(parked) == expected_parked(committed, max_retry_count), (
        "parked other messages than failed ones"
    )
    assert not acked & set(parked), "a message was both acked and parked"


def check_attempts(
    rows: list[Delivery], dead: set[int], parked: dict[int, float], max_retry_count: int
) -> None:
    """Within a process, a message's attempts are 1, 2, ... in order, each started after the
    previous one failed, and the last one is an ack, or a failure of the last allowed
    attempt that parked it; only a killed process leaves a message unfinished."""
    attempts: dict[tuple[int, int], list[Delivery]] = defaultdict(list)
    for row in rows:
        attempts[row.pid, row.position].append(row)
    for (pid, position), tries in attempts.items():
        tries.sort(key=lambda row: row.started_at)
        where = f"message {position} in pid {pid}: {tries}"
        assert [row.delivery_attempt for row in tries] == list(range(1, len(tries) + 1)), where
        for earlier, later in itertools.pairwise(tries):
            assert earlier.outcome == "fail", where
            assert earlier.finished_at is not None, where
            assert earlier.finished_at <= later.started_at, where
        last = tries[-1]
        if pid in dead:
            continue
        assert last.outcome == "ack" or (
            last.outcome == "fail" and last.delivery_attempt == max_retry_count
        ), where
        assert (last.outcome == "fail") == (position in parked), where


def check_checkpoints(
    samples: list[CheckpointSample],
    rows: list[Delivery],
    messages: list[Committed],
    parked: dict[int, float],
) -> None:
    """The stored checkpoint never moved back, and whenever it stood at C every committed
    message at or below C had already been acked or parked (no skipped message: KurrentDB
    #5497 computed it from dispatched messages only)."""
    order = [m.at for m in messages]
    first_ack: dict[int, float] = {}
    for row in rows:
        if row.outcome == "ack" and row.finished_at is not None:
            first_ack[row.position] = min(
                first_ack.get(row.position, row.finished_at), row.finished_at
            )
    done_by: list[float] = []  # done_by[i]: when messages order[0..i] were all finished
    latest = 0.0
    for at in order:
        finished = first_ack.get(at[1], parked.get(at[1], float("inf")))
        latest = max(latest, finished)
        done_by.append(latest)
    checkpoints = [(s.checkpoint.transaction_id, s.checkpoint.position) for s in samples]
    assert checkpoints == sorted(checkpoints), "the stored checkpoint moved back"
    for sample, checkpoint in zip(samples, checkpoints, strict=True):
        covered = bisect.bisect_right(order, checkpoint)
        if covered:
            assert done_by[covered - 1] <= timestamp(sample.observed_at), (
                f"checkpoint {checkpoint} stored at {sample.observed_at} passed a message"
                " that was not acked or parked yet"
            )


def check_keys(
    rows: list[Delivery],
    messages: list[Committed],
    parked: dict[int, float],
    starts: dict[int, Position],
    deaths: dict[int, float],
) -> None:
    """Pinned: one delivery per key in flight at a time, per-key order, nothing skipped.

    Within each process, per key: deliveries by start time never overlap, go in (transaction
    id, position) order, move to the key's next message only after an ack or the park of the
    previous one, and the messages tried are exactly the key's committed messages after the
    checkpoint the process started from (all of them for the survivor, a prefix for a killed
    one). Across processes: a killed process's unfinished handlers end at its death, and no
    two deliveries of a key overlap anywhere.
    """
    by_key: dict[str | None, list[Position]] = defaultdict(list)
    for message in messages:
        by_key[message.key].append(message.at)
    mine: dict[tuple[int, str | None], list[Delivery]] = defaultdict(list)
    for row in rows:
        mine[row.pid, row.partition_key].append(row)
    for (pid, key), deliveries in mine.items():
        deliveries.sort(key=lambda row: row.started_at)
        where = f"key {key} in pid {pid}"
        for earlier, later in itertools.pairwise(deliveries):
            assert earlier.finished_at is not None, f"{where}: {later} started while {earlier} ran"
            assert earlier.finished_at <= later.started_at, f"{where}: {earlier} overlaps {later}"
            assert earlier.at <= later.at, f"{where}: {later} after {earlier}: out of order"
            if earlier.at != later.at:
                assert earlier.outcome == "ack" or earlier.position in parked, (
                    f"{where}: {later} started while {earlier} waited for a retry"
                )
        tried = list(dict.fromkeys(row.at for row in deliveries))
        after_start = [at for at in by_key[key] if at > starts[pid]]
        if pid in deaths:
            assert tried == after_start[: len(tried)], f"{where}: skipped or reordered {tried}"
        else:
            assert tried == after_start, f"{where}: tried {tried}, not {after_start}"
    everywhere: dict[str | None, list[Delivery]] = defaultdict(list)
    for row in rows:
        everywhere[row.partition_key].append(row)
    for key, deliveries in everywhere.items():
        deliveries.sort(key=lambda row: row.started_at)
        busy_until = 0.0
        for row in deliveries:
            assert row.started_at >= busy_until, f"key {key}: {row} started while another ran"
            end = row.finished_at if row.finished_at is not None else deaths.get(row.pid)
            assert end is not None, f"{row} never finished in a process that was not killed"
            busy_until = max(busy_until, end)


def check_starts(
    leaders: list[Daemon],
    starts: dict[int, Position],
    deaths: dict[int, float],
    rows: list[Delivery],
    messages: list[Committed],
    parked: dict[int, float],
) -> None:
    """Each leader resumed from the checkpoint stored when its predecessor died, and that
    checkpoint passed only messages finished before the death."""
    order = [m.at for m in messages]
    finished_at: dict[int, float] = {}
    for row in rows:
        if row.outcome == "ack" and row.finished_at is not None:
            finished_at[row.position] = min(finished_at.get(row.position, 1e18), row.finished_at)
    points = [starts[leader.pid] for leader in leaders]
    assert points == sorted(points), f"the checkpoint moved back across leaders: {points}"
    for previous, leader in itertools.pairwise(leaders):
        died = deaths[previous.pid]
        for at in order[: bisect.bisect_right(order, starts[leader.pid])]:
            done = finished_at.get(at[1], parked.get(at[1]))
            assert done is not None, f"{at} was never finished"
            assert done <= died, (
                f"{leader.name} started after {starts[leader.pid]}, past {at}, which was not"
                f" finished when {previous.name} died"
            )


def checked_after(rows: list[Delivery], moment: Any) -> list[Delivery]:
    """The deliveries whose handler was allowed to start after `moment` (a database time).

    A handler thread runs one delivery at a time, and the daemon asks whether a delivery
    still counts right before its handler starts, on that thread. So when a delivery's start
    row went in after `moment`, the check of every later delivery on the same thread came
    after `moment` too. The first such delivery itself proves nothing: it may have been
    checked before and recorded after. No clock window: only the order of one thread's rows.
    """
    threads: dict[tuple[int, str], list[Delivery]] = defaultdict(list)
    for row in rows:
        if row.recorded_at > moment:
            threads[row.pid, row.thread].append(row)
    return [
        row
        for deliveries in threads.values()
        for row in sorted(deliveries, key=lambda row: row.recorded_at)[1:]
    ]
