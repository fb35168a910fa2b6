"""Persistent subscriptions (consumer groups) end to end: real PostgreSQL, real `outbox poll`
processes, a sync handler that records every delivery (tests.support.keyed_handler).

- pinned under faults: consumer count changes and kill -9 while writers commit; nothing lost,
  one delivery per key in flight at a time, per-key order, a sound checkpoint throughout;
- round-robin under the same faults: nothing lost, a sound checkpoint;
- seek forward while deliveries are in flight: nothing read before the seek starts after the
  leader applied it, the checkpoint never goes back below the target, the epoch rises by one;
- observability: outbox.subscription_status and `outbox status` while a pinned run is busy.
"""

import bisect
import itertools
import random
import re
import threading
import time
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import psycopg
import pytest

import outbox
from poller import administration
from tests.acceptance.cli import outbox_command
from tests.support.daemons import (
    CheckpointLog,
    CheckpointSample,
    Daemon,
    DaemonGroup,
    Written,
    current_leader,
    daemon_group,
    probe,
    stored_checkpoint,
    wait_until,
)
from tests.support.keyed_handler import (
    Delivery,
    create_deliveries_table,
    fails,
    read_deliveries,
)

HANDLER = "tests.support.keyed_handler:handle"
SLOW_HANDLER = "tests.support.keyed_handler:handle_slowly"
PUBLICATION = "orders"
SUBSCRIPTION = "cg"
# A long lease: under a loaded machine a leader must not lose its lease between renewals (a
# kill -9 is noticed at once anyway: the dead leader's session is gone).
DAEMON_OPTIONS = ("--lease-seconds", "8")
RENEW_EVERY = 1.0  # what `outbox poll` derives from --lease-seconds 8: min(1, 8 / 4)
# Two attempts, so a message whose two seeded attempts both fail (about 1 in 400) is parked.
MAX_RETRY_COUNT = 2
MESSAGES = 5000
BACKLOG = 2000
Position = tuple[int, int]  # (transaction_id, position), as poller.positions.Position


@pytest.fixture
def daemons(database_url: str, tmp_path: Path) -> Iterator[DaemonGroup]:
    create_deliveries_table(database_url)
    with daemon_group(database_url, tmp_path) as group:
        yield group


def cli(url: str, *arguments: str) -> str:
    done = outbox_command(list(arguments), url)
    assert done.returncode == 0, f"outbox {' '.join(arguments)}:\n{done.stdout}{done.stderr}"
    return done.stdout


def settings(strategy: str, consumers: int, max_in_flight: int) -> dict[str, Any]:
    """Checkpoints every 0.2 s (each also stores the runtime figures subscription_status
    shows); quick retries; two attempts before parking."""
    return {
        "strategy": strategy,
        "consumers": consumers,
        "max_in_flight": max_in_flight,
        "checkpoint_after": 0.2,
        "min_checkpoint_count": 1,
        "max_retry_count": MAX_RETRY_COUNT,
        "retry_backoff_initial": 0.02,
        "retry_backoff_max": 0.1,
    }


# Writing ------------------------------------------------------------------------------------


class KeyedWriter:
    """Threads appending several messages with random keys per transaction, until stopped or
    `cap` messages are written; one transaction in ten rolls back. Use as a context manager."""

    def __init__(
        self,
        url: str,
        *,
        keys: int,
        cap: int,
        interval: float,
        seed: int,
        threads: int = 2,
    ) -> None:
        self.url = url
        self.keys = keys
        self.cap = cap
        self.interval = interval
        self.written = Written()
        self.errors: list[BaseException] = []
        self._count = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._run, args=(seed + n,), daemon=True, name=f"writer-{n}")
            for n in range(threads)
        ]

    def __enter__(self) -> "KeyedWriter":
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()

    @property
    def count(self) -> int:
        with self._lock:
            return self._count

    @property
    def finished(self) -> bool:
        """Every thread is done: the cap was reached (or a writer failed)."""
        return not any(thread.is_alive() for thread in self._threads)

    def stop(self) -> Written:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=60)
        if self.errors:
            raise AssertionError(f"a writer failed: {self.errors[0]!r}") from self.errors[0]
        return self.written

    def _reserve(self, wanted: int) -> int:
        with self._lock:
            granted = max(0, min(wanted, self.cap - self._count))
            self._count += granted
            return granted

    def _run(self, seed: int) -> None:
        rng = random.Random(seed)
        try:
            with psycopg.connect(self.url) as conn:
                while not self._stop.is_set():
                    size = self._reserve(rng.randint(2, 8))
                    if not size:
                        return
                    rolled_back = rng.random() < 0.1
                    # Most of a transaction's messages are about one key (an order and its
                    # events), so a key in flight usually has its next messages buffered:
                    # what makes a consumer change drain keys instead of just moving them.
                    main_key = rng.randrange(self.keys)
                    messages = [
                        outbox.NewMessage(
                            "KeyedEvent",
                            {"n": rng.random()},
                            partition_key=f"key-{key}",
                        )
                        for key in (
                            main_key if rng.random() < 0.7 else rng.randrange(self.keys)
                            for _ in range(size)
                        )
                    ]
                    positions: list[int] = []
                    with conn.transaction() as transaction:
                        positions = outbox.append_many(conn, PUBLICATION, messages)
                        if rolled_back:
                            raise psycopg.Rollback(transaction)
                    self.written.add(positions, committed=not rolled_back)
                    self._stop.wait(self.interval)
        except BaseException as error:  # reported by stop()
            self.errors.append(error)


def write_messages(url: str, count: int, keys: int, seed: int) -> None:
    """`count` committed messages, five per transaction, random keys."""
    rng = random.Random(seed)
    with psycopg.connect(url) as conn:
        for start in range(0, count, 5):
            with conn.transaction():
                outbox.append_many(
                    conn,
                    PUBLICATION,
                    [
                        outbox.NewMessage(
                            "KeyedEvent", {"n": n}, partition_key=f"key-{rng.randrange(keys)}"
                        )
                        for n in range(start, min(start + 5, count))
                    ],
                )


# What the database holds --------------------------------------------------------------------


class Committed(NamedTuple):
    at: Position
    key: str | None


def committed_messages(url: str) -> list[Committed]:
    """Every committed message of the publication, in delivery order."""
    rows = (
        probe(url)
        .execute(
            "SELECT transaction_id::text::bigint, position, partition_key FROM outbox.messages"
            " WHERE publication_id = %s ORDER BY transaction_id, position",
            (PUBLICATION,),
        )
        .fetchall()
    )
    return [Committed((tx, pos), key) for tx, pos, key in rows]


def parked_times(url: str) -> dict[int, float]:
    """Parked position -> when it was (last) parked, as time.time()."""
    rows = (
        probe(url)
        .execute(
            "SELECT position, extract(epoch FROM parked_at)::float8"
            " FROM outbox.parked_messages WHERE subscription_id = %s",
            (SUBSCRIPTION,),
        )
        .fetchall()
    )
    return {position: at for position, at in rows}


def deliveries_by(url: str, pid: int) -> int:
    row = probe(url).execute("SELECT count(*) FROM deliveries WHERE pid = %s", (pid,)).fetchone()
    assert row is not None
    return int(row[0])


def finished_positions(url: str) -> set[int]:
    """Positions acked at least once or parked."""
    rows = (
        probe(url)
        .execute(
            "SELECT position FROM deliveries WHERE outcome = 'ack' UNION"
            " SELECT position FROM outbox.parked_messages WHERE subscription_id = %s",
            (SUBSCRIPTION,),
        )
        .fetchall()
    )
    return {row[0] for row in rows}


def epoch_of(url: str) -> int:
    row = (
        probe(url)
        .execute(
            "SELECT epoch FROM outbox.subscriptions WHERE subscription_id = %s", (SUBSCRIPTION,)
        )
        .fetchone()
    )
    assert row is not None
    return int(row[0])


class Status(NamedTuple):
    observed_at: float
    consumers: int
    in_flight: int
    retry_queue: int
    parked_messages: int
    draining_keys: list[str]


class StatusLog:
    """Samples outbox.subscription_status every `interval` s in a thread."""

    def __init__(self, url: str, interval: float = 0.05) -> None:
        self.url = url
        self.interval = interval
        self.samples: list[Status] = []
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="status-log", daemon=True)

    def __enter__(self) -> "StatusLog":
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()

    def stop(self) -> list[Status]:
        self._stop.set()
        self._thread.join(timeout=30)
        if self.error is not None:
            raise AssertionError(f"the status log failed: {self.error!r}") from self.error
        return self.samples

    def latest(self) -> Status | None:
        return self.samples[-1] if self.samples else None

    def _run(self) -> None:
        try:
            with psycopg.connect(self.url, autocommit=True) as conn:
                while not self._stop.is_set():
                    row = conn.execute(
                        "SELECT extract(epoch FROM clock_timestamp())::float8, consumers,"
                        " in_flight, retry_queue, parked_messages, draining_keys"
                        " FROM outbox.subscription_status WHERE subscription_id = %s",
                        (SUBSCRIPTION,),
                    ).fetchone()
                    if row is not None:
                        self.samples.append(Status(*row))
                    self._stop.wait(self.interval)
        except BaseException as error:  # reported by stop()
            self.error = error


# Checks -------------------------------------------------------------------------------------


def timestamp(value: Any) -> float:
    return float(value.timestamp())


def expected_parked(positions: Iterable[int]) -> set[int]:
    """Messages whose every allowed attempt fails: they must be parked, all others acked."""
    return {
        position
        for position in positions
        if all(fails(position, attempt) for attempt in range(1, MAX_RETRY_COUNT + 1))
    }


def check_nothing_lost(
    rows: list[Delivery], messages: list[Committed], written: Written, parked: dict[int, float]
) -> None:
    committed = {m.at[1] for m in messages}
    assert committed == written.committed, "outbox.messages and the writers disagree"
    delivered = {row.position for row in rows}
    acked = {row.position for row in rows if row.outcome == "ack"}
    assert delivered <= committed, f"invented: {sorted(delivered - committed)[:10]}"
    assert not delivered & written.rolled_back, "a rolled-back message was delivered"
    lost = committed - acked - set(parked)
    assert not lost, f"{len(lost)} committed messages neither acked nor parked: {sorted(lost)[:10]}"
    assert set(parked) == expected_parked(committed), "parked other messages than failed ones"
    assert not acked & set(parked), "a message was both acked and parked"


def check_attempts(rows: list[Delivery], dead: set[int], parked: dict[int, float]) -> None:
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
            last.outcome == "fail" and last.delivery_attempt == MAX_RETRY_COUNT
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


# The fault run ------------------------------------------------------------------------------


@dataclass
class FaultRun:
    leaders: list[Daemon] = field(default_factory=list)
    starts: dict[int, Position] = field(default_factory=dict)
    deaths: dict[int, float] = field(default_factory=dict)
    statuses: list[Status] = field(default_factory=list)
    checkpoints: list[CheckpointSample] = field(default_factory=list)
    written: Written = field(default_factory=Written)
    configured: list[int] = field(default_factory=list)


def leading(url: str, pool: list[Daemon]) -> Daemon | None:
    """The daemon of `pool` that holds the lease and has started its term, if any."""
    lease = current_leader(url, SUBSCRIPTION)
    for daemon in pool:
        if lease is not None and daemon.pid == lease.pid and daemon.alive():
            return daemon if daemon.terms(SUBSCRIPTION) else None
    return None


def consumer_changes(daemon: Daemon, count: int) -> int:
    return len(re.findall(rf"subscription {SUBSCRIPTION}: {count} consumers\b", daemon.log()))


def run_with_faults(
    url: str, daemons: DaemonGroup, strategy: str, seed: int, *, cli_updates: bool
) -> FaultRun:
    """8 consumers x 4 in flight; writers commit ~5,000 messages on 1,000 keys while the
    consumer count goes 8 -> 3 -> 11 -> 8 (`outbox subscription update NAME --consumers N`,
    or the same administration call without a process start) and the leader is killed twice
    (a standby takes over each time); then everything drains and the last leader stops."""
    rng = random.Random(seed)
    began = time.monotonic()
    run = FaultRun(configured=[8])
    with psycopg.connect(url) as conn:
        administration.create(conn, SUBSCRIPTION, PUBLICATION, "start", settings(strategy, 8, 4))
    # A backlog to start with (the daemons were down): every consumer is full at first, so
    # under pinned a full owner holds messages back while the others go past them.
    backlog = KeyedWriter(url, keys=1000, cap=BACKLOG, interval=0.0, seed=seed - 1)
    with backlog:
        wait_until(lambda: backlog.finished, 60, "the backlog")
    pool = [daemons.start(SUBSCRIPTION, *DAEMON_OPTIONS, handler=HANDLER) for _ in range(2)]
    leader = wait_until(lambda: leading(url, pool), 60, "a leader")
    run.leaders.append(leader)
    # The standby for the second kill starts now: a process start takes seconds here.
    pool.append(daemons.start(SUBSCRIPTION, *DAEMON_OPTIONS, handler=HANDLER))
    writer = KeyedWriter(url, keys=1000, cap=MESSAGES - BACKLOG + 1500, interval=0.025, seed=seed)
    with StatusLog(url) as statuses, CheckpointLog(url, SUBSCRIPTION) as checkpoints, writer:
        for number, step in enumerate(("3", "kill", "11", "kill", "8"), start=1):
            # The first change lands in the backlog (new owners full while keys drain, where a
            # checkpoint computed from dispatched messages would pass one: KurrentDB #5497),
            # the rest spread over the writing, each once the leader is busy.
            progress = deliveries_by(url, leader.pid) + 100
            wait_until(
                lambda leader=leader, progress=progress, number=number: (
                    writer.finished
                    or (
                        writer.count >= 700 * (number - 1)
                        and deliveries_by(url, leader.pid) >= progress
                    )
                ),
                60,
                f"{leader.name} to make progress",
            )
            print(f"{time.monotonic() - began:6.1f} s: {step}, {writer.count} written")
            if step == "kill":
                # A standby must be ready to take over; then a random moment of the term.
                standby = next(d for d in pool if d is not leader)
                standby.wait_for_log(f"{SUBSCRIPTION} has a leader; standing by", 60)
                time.sleep(rng.uniform(0.0, 0.3))
                run.deaths[leader.pid] = time.time()
                leader.kill()
                pool.remove(leader)
                leader = wait_until(lambda: leading(url, pool), 60, "a new leader")
                run.leaders.append(leader)
            else:
                count = int(step)
                seen = consumer_changes(leader, count)
                if cli_updates:
                    cli(url, "subscription", "update", SUBSCRIPTION, "--consumers", step)
                else:
                    with psycopg.connect(url) as conn:
                        administration.update_settings(conn, SUBSCRIPTION, {"consumers": count})
                run.configured.append(count)
                wait_until(
                    lambda leader=leader, count=count, seen=seen: (
                        consumer_changes(leader, count) > seen
                    ),
                    30,
                    f"{leader.name} to apply {count} consumers",
                )
        wait_until(lambda: writer.finished or writer.count >= MESSAGES - BACKLOG, 60, "the writers")
        run.written = writer.stop()
        run.written.add(sorted(backlog.written.committed), committed=True)
        run.written.add(sorted(backlog.written.rolled_back), committed=False)
        print(f"{time.monotonic() - began:6.1f} s: writer stopped at {writer.count}")
        last = max(m.at for m in committed_messages(url))

        def drained() -> bool:
            status = statuses.latest()
            stored = stored_checkpoint(url, SUBSCRIPTION)
            at_end = (stored.transaction_id, stored.position) == last
            return at_end and status is not None and status.in_flight == 0

        wait_until(drained, 120, "the checkpoint to reach the last message, nothing in flight")
        print(f"{time.monotonic() - began:6.1f} s: drained")
    run.statuses = statuses.samples
    run.checkpoints = checkpoints.samples
    assert leader.terminate() == 0, daemons.logs()
    assert not [line for d in daemons.started for line in d.errors()], daemons.logs()
    for daemon in run.leaders:
        terms = daemon.terms(SUBSCRIPTION)
        assert len(terms) == 1, f"{daemon.name} led {len(terms)} times:\n{daemons.logs()}"
        run.starts[daemon.pid] = (terms[0].transaction_id, terms[0].position)
    return run


def check_fault_run(url: str, run: FaultRun, *, pinned: bool) -> list[Delivery]:
    rows = read_deliveries(url)
    messages = committed_messages(url)
    parked = parked_times(url)
    dead = set(run.deaths)
    assert len(messages) >= 4000, f"only {len(messages)} messages written"
    assert {row.pid for row in rows} <= {d.pid for d in run.leaders}, "a standby delivered"
    check_nothing_lost(rows, messages, run.written, parked)
    check_attempts(rows, dead, parked)
    check_checkpoints(run.checkpoints, rows, messages, parked)
    check_starts(run.leaders, run.starts, run.deaths, rows, messages, parked)
    if pinned:
        check_keys(rows, messages, parked, run.starts, run.deaths)
    # What operators saw meanwhile: consumers as configured, work in flight.
    assert any(s.in_flight > 0 for s in run.statuses), "subscription_status never showed work"
    assert {s.consumers for s in run.statuses if s.consumers} <= set(run.configured)
    return rows


@pytest.mark.slow
def test_pinned_keeps_one_delivery_per_key_in_order_through_consumer_changes_and_kills(
    database_url: str, daemons: DaemonGroup
) -> None:
    seed = random.randrange(2**32)
    run = run_with_faults(database_url, daemons, "pinned", seed, cli_updates=True)
    rows = check_fault_run(database_url, run, pinned=True)
    # The faults really happened mid-flight: the killed leaders left handlers unfinished
    # or were re-delivered from their checkpoint.
    assert len(run.leaders) == 3, f"seed {seed}"
    assert any(row.pid in run.deaths for row in rows)


@pytest.mark.slow
def test_round_robin_loses_nothing_through_consumer_changes_and_kills(
    database_url: str, daemons: DaemonGroup
) -> None:
    seed = random.randrange(2**32)
    run = run_with_faults(database_url, daemons, "round-robin", seed, cli_updates=False)
    check_fault_run(database_url, run, pinned=False)
    assert len(run.leaders) == 3, f"seed {seed}"


# Seek ---------------------------------------------------------------------------------------

LOG_TIME = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3}) ", re.MULTILINE)
# A handler thread that read the epoch just before the leader applied the seek may record
# its start a moment after; anything later was started with the seek already applied.
SEEK_RACE = 0.025


def applied_at(daemon: Daemon, to: str) -> float:
    """When the leader applied the seek to `to`: its log line's time, as time.time()."""
    line = daemon.wait_for_log(rf"(?m)^.* subscription {SUBSCRIPTION}: seek to {to}$", 30)[0]
    match = LOG_TIME.match(line)
    assert match is not None, line
    return time.mktime(time.strptime(match[1], "%Y-%m-%d %H:%M:%S")) + int(match[2]) / 1000


@pytest.mark.parametrize("strategy", ["pinned", "round-robin"])
def test_seek_forward_while_handlers_run_delivers_nothing_read_before_it(
    database_url: str, daemons: DaemonGroup, strategy: str
) -> None:
    total, target_index = 1500, 1000
    with psycopg.connect(database_url) as conn:
        # 48 deliveries in flight for 16 handler threads: most of them wait for a thread.
        administration.create(conn, SUBSCRIPTION, PUBLICATION, "start", settings(strategy, 12, 4))
    write_messages(database_url, total, keys=200, seed=7)
    order = [m.at for m in committed_messages(database_url)]
    daemon = daemons.start(SUBSCRIPTION, *DAEMON_OPTIONS, handler=SLOW_HANDLER)
    wait_until(lambda: deliveries_by(database_url, daemon.pid) >= 150, 60, "150 deliveries")
    target = order[target_index]
    to = f"{target[0]}:{target[1]}"
    epoch = epoch_of(database_url)
    with CheckpointLog(database_url, SUBSCRIPTION) as checkpoints:
        before = read_deliveries(database_url)
        assert max(row.at for row in before) < target, "the daemon got past the target already"
        output = cli(database_url, "seek", SUBSCRIPTION, "--to", to)
        returned = time.time()
        applied = applied_at(daemon, to)
        after_target = {at[1] for at in order[target_index + 1 :]}
        wait_until(
            lambda: (
                finished_positions(database_url) >= after_target
                and stored_checkpoint(database_url, SUBSCRIPTION) == order[-1]
            ),
            60,
            "every message after the target, and the checkpoint at the end",
        )
    assert daemon.terminate() == 0, daemons.logs()
    assert not daemon.errors(), daemons.logs()

    assert f"(epoch {epoch + 1})" in output
    assert epoch_of(database_url) == epoch + 1
    # The leader hears of a seek at its next renewal (or its next checkpoint write, which the
    # new epoch fences out), not when the command returns.
    assert applied - returned < RENEW_EVERY + 2.0, f"seek applied {applied - returned:.2f} s late"

    rows = read_deliveries(database_url)
    stale = [row for row in rows if row.at <= target and row.started_at > applied + SEEK_RACE]
    assert not stale, (
        f"{len(stale)} deliveries of messages at or before the seek target started after the"
        f" leader applied the seek ({applied}): {stale[:5]}"
    )
    lagging = [row for row in rows if row.at <= target and row.started_at > returned]
    # The checkpoint never went back below the target once the seek was stored: a stale ack
    # of the old epoch cannot move it (write_checkpoint is fenced by epoch, never backwards).
    after_seek = [s for s in checkpoints.samples if timestamp(s.observed_at) > returned]
    assert after_seek, "no checkpoint sample after the seek"
    points = [(s.checkpoint.transaction_id, s.checkpoint.position) for s in after_seek]
    assert min(points) >= target, f"the checkpoint went back below {to}: {min(points)}"
    assert points == sorted(points), "the checkpoint moved back after the seek"
    if strategy == "pinned":
        keyed: dict[str | None, list[Delivery]] = defaultdict(list)
        for row in rows:
            keyed[row.partition_key].append(row)
        for key, deliveries in keyed.items():
            deliveries.sort(key=lambda row: row.started_at)
            for earlier, later in itertools.pairwise(deliveries):
                # Old-epoch handlers still running keep their key (Pulsar #25627).
                assert earlier.finished_at is not None
                assert earlier.finished_at <= later.started_at, f"key {key}: overlap"
            # Under pinned the old epoch may have got ahead of the target on some keys; what
            # started once the seek was applied is the new epoch, in per-key order.
            new_epoch = [row.at for row in deliveries if row.started_at > applied + SEEK_RACE]
            assert new_epoch == sorted(new_epoch), f"key {key} out of order after the seek"
    print(f"{len(lagging)} deliveries before the leader applied the seek, {len(rows)} in all")


# Observability ------------------------------------------------------------------------------


def test_subscription_status_and_outbox_status_show_a_busy_pinned_group(
    database_url: str, daemons: DaemonGroup
) -> None:
    cli(
        database_url,
        *("subscription", "create", SUBSCRIPTION, "--publication", PUBLICATION),
        *("--from", "start", "--strategy", "pinned", "--consumers", "4", "--max-in-flight", "2"),
        *("--checkpoint-after", "0.2", "--min-checkpoint-count", "1"),
        *("--max-retry-count", str(MAX_RETRY_COUNT), "--retry-backoff-initial", "0.5"),
    )
    write_messages(database_url, 200, keys=100, seed=11)
    daemon = daemons.start(SUBSCRIPTION, *DAEMON_OPTIONS, handler=SLOW_HANDLER)
    # ~60 messages a second: 4 consumers x 2 in flight of a 50 ms handler keep up, and stay
    # busy while the slow CLI processes below run.
    writer = KeyedWriter(database_url, keys=100, cap=3000, interval=0.15, seed=11)
    checkpoints = CheckpointLog(database_url, SUBSCRIPTION)
    with StatusLog(database_url) as statuses, checkpoints, writer:
        wait_until(
            lambda: (s := statuses.latest()) is not None and s.consumers == 4 and s.in_flight > 0,
            60,
            "subscription_status to show 4 consumers with work in flight",
        )
        status = outbox_command(["status"], database_url)
        assert status.returncode == 0, status.stderr
        assert SUBSCRIPTION in status.stdout, status.stdout
        assert PUBLICATION in status.stdout, status.stdout
        cli(database_url, "subscription", "update", SUBSCRIPTION, "--consumers", "2")
        changed = wait_until(
            lambda: next((s for s in statuses.samples if s.consumers == 2), None),
            30,
            "subscription_status to show 2 consumers",
        )
        wait_until(
            lambda: any(s.in_flight > 0 for s in statuses.samples if s.consumers == 2),
            30,
            "work in flight on 2 consumers",
        )
        writer.stop()
        committed = {m.at[1] for m in committed_messages(database_url)}
        wait_until(
            lambda: finished_positions(database_url) >= committed,
            60,
            "every message acked or parked",
        )
        wait_until(
            lambda: (s := statuses.latest()) is not None and s.in_flight == 0,
            30,
            "nothing in flight",
        )
    assert daemon.terminate() == 0, daemons.logs()
    samples = statuses.samples
    # 4 consumers x 2 in flight; after the change, the removed consumers' deliveries drain.
    assert all(s.in_flight <= 8 for s in samples), max(s.in_flight for s in samples)
    assert all(s.in_flight <= 4 for s in samples if s.observed_at > changed.observed_at + 1.0), (
        "removed consumers still got work"
    )
    assert any(s.retry_queue > 0 for s in samples), "no retry ever showed up in retry_queue"
    assert all(isinstance(s.draining_keys, list) for s in samples)
    parked = parked_times(database_url)
    assert set(parked) == expected_parked(committed)
    assert samples[-1].parked_messages == len(parked)
    # A full owner holds its keys' messages back while others go past (50 ms handlers): the
    # checkpoint must not pass them (KurrentDB #5497).
    rows = read_deliveries(database_url)
    check_checkpoints(checkpoints.samples, rows, committed_messages(database_url), parked)
