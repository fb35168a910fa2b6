"""One subscription sharded over several `outbox poll` processes, end to end: real PostgreSQL,
real processes, a sync handler recording every delivery's start and end on the machine-wide
monotonic clock (tests.support.keyed_handler).

- membership and layout churn under 16 out-of-order writers: a kill -9 and a restart, a
  SIGTERM and a restart, a fourth process joining and leaving, a consumer change and two
  changes of the shard count; nothing lost, per-key order, no key in two handlers at once;
- fencing: a process's shard sessions terminated, then the process SIGSTOPped past its lease
  and resumed; the same, and no checkpoint written by a session that lost its lease;
- balance: three processes lead four of twelve shards each, and keep them while nothing
  changes.

The rules every run is checked against live in tests.support.shard_invariants.
"""

import functools
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from outbox.positions import Position
from tests.support.cli import outbox_succeeds
from tests.support.daemons import Daemon, DaemonGroup, daemon_group, wait_until
from tests.support.databases import probe
from tests.support.delivery_invariants import check_nothing_lost
from tests.support.keyed_handler import Delivery, create_deliveries_table, read_deliveries
from tests.support.shard_invariants import (
    check_floor,
    check_key_order,
    check_one_handler_per_key,
    check_shard_checkpoints,
)
from tests.support.shards import (
    applied_consumers,
    barrier,
    caught_up,
    current_leaders,
    draining,
    live_members,
    record_shard_checkpoints,
    record_shard_leases,
    shard_checkpoint_changes,
    shard_lease_changes,
    shard_leases,
    wait_for_assignment,
)
from tests.support.stored import (
    committed_messages,
    parked_times,
    record_subscription_changes,
    subscription_changes,
)
from tests.support.writers import KeyedWriter, Written, write_keyed_messages

HANDLER = "tests.support.keyed_handler:handle"
PUBLICATION = "orders"
SUBSCRIPTION = "sharded"
# As in the other kill tests (test_consumer_groups.py): a 3 s lease, renewed every 0.75 s; a
# kill -9 or a SIGSTOP costs one lease before the shards move.
LEASE_SECONDS = 3
DAEMON_OPTIONS = ("--lease-seconds", str(LEASE_SECONDS))
# Two attempts, so a message whose two seeded attempts both fail (about 1 in 400) is parked.
MAX_RETRY_COUNT = 2
KEYS = 120


@pytest.fixture
def daemons(database_url: str, tmp_path: Path) -> Iterator[DaemonGroup]:
    create_deliveries_table(database_url)
    record_shard_checkpoints(database_url)
    record_shard_leases(database_url)
    record_subscription_changes(database_url)
    with daemon_group(database_url, tmp_path) as group:
        yield group


def create_sharded(url: str, shards: int, consumers: int) -> None:
    """Pinned, from the start; checkpoints every 0.2 s; quick retries, two attempts."""
    outbox_succeeds(
        url,
        *("subscription", "create", SUBSCRIPTION, "--publication", PUBLICATION),
        *("--from", "start", "--strategy", "pinned", "--consumers", str(consumers)),
        *("--shards", str(shards), "--checkpoint-after", "0.2", "--min-checkpoint-count", "1"),
        *("--max-retry-count", str(MAX_RETRY_COUNT)),
        *("--retry-backoff-initial", "0.02", "--retry-backoff-max", "0.1"),
    )


def deliveries_started(url: str) -> int:
    row = probe(url).execute("SELECT count(*) FROM deliveries").fetchone()
    assert row is not None
    return int(row[0])


def wait_for_progress(url: str, more: int, timeout: float = 60) -> None:
    """Wait until `more` deliveries started after now: the next fault lands mid-stream."""
    target = deliveries_started(url) + more
    wait_until(lambda: deliveries_started(url) >= target, timeout, f"{more} more deliveries")


def change_shard_count_under_a_burst(url: str, shards: int, seed: int) -> tuple[Position, Written]:
    """`outbox subscription update --shards` while a burst of 800 messages on two keys is being
    written, then wait (polling the subscription row) until the old shards drained to the
    barrier and the change ended. Under pinned a key's messages go one at a time, so the old
    shards are still busy with hundreds of messages of those keys before the barrier, seconds
    of them, while the writers go on writing the same keys after it: what the new shards must
    wait for. The barrier, and what the burst wrote."""
    burst = KeyedWriter(url, PUBLICATION, keys=2, cap=800, interval=0.0, seed=seed, threads=4)
    with burst:
        wait_until(lambda: burst.count >= 300, 30, "the burst to be under way")
        outbox_succeeds(url, "subscription", "update", SUBSCRIPTION, "--shards", str(shards))
        at = barrier(url, SUBSCRIPTION)
        assert at is not None, "a change of the shard count without a barrier"
        wait_until(lambda: burst.finished, 30, "the burst")
    wait_until(lambda: not draining(url, SUBSCRIPTION), 60, f"the change to {shards} shards")
    return at, burst.stop()


def wait_for_drain(url: str) -> None:
    """Every shard's checkpoint past its last message, so nothing is unfinished anywhere."""
    wait_until(lambda: caught_up(url, SUBSCRIPTION), 120, "every shard to catch up", 0.1)


def stop_gracefully(url: str, daemon: Daemon) -> None:
    """SIGTERM: exit 0, having given up its leases and its membership on the way out, so its
    shards move at once instead of after the lease."""
    assert daemon.terminate() == 0, daemon.log()
    kept = [lease for lease in shard_leases(url, SUBSCRIPTION) if lease.pid == daemon.pid]
    assert not [lease for lease in kept if lease.alive], f"{daemon.name} kept {kept}"
    assert daemon.pid not in live_members(url, SUBSCRIPTION)


def check_run(
    url: str, written: Written, deaths: dict[int, float], ends: dict[int, Position]
) -> list[Delivery]:
    """The rules of tests.support.shard_invariants over everything recorded; the deliveries."""
    rows = read_deliveries(url)
    messages = committed_messages(url, PUBLICATION)
    parked = parked_times(url, SUBSCRIPTION)
    check_nothing_lost(rows, messages, written, parked, MAX_RETRY_COUNT)
    check_key_order(rows, messages, set(parked), MAX_RETRY_COUNT)
    check_one_handler_per_key(rows, deaths)
    check_shard_checkpoints(
        shard_checkpoint_changes(url, SUBSCRIPTION), rows, messages, parked, ends
    )
    check_floor(subscription_changes(url, SUBSCRIPTION), rows, messages, parked)
    return rows


# Churn --------------------------------------------------------------------------------------


@pytest.mark.slow
def test_sharded_processes_keep_per_key_order_through_kills_joins_and_shard_changes(
    database_url: str, daemons: DaemonGroup
) -> None:
    url = database_url
    began = time.monotonic()

    def say(what: str) -> None:
        print(f"{time.monotonic() - began:6.1f} s: {what}")

    def start(name: str) -> Daemon:
        return daemons.start(SUBSCRIPTION, *DAEMON_OPTIONS, handler=HANDLER, name=name)

    def settle() -> None:
        wait_for_assignment(url, SUBSCRIPTION, {d.pid for d in live})
        say(f"{len(live)} processes share the shards")

    create_sharded(url, shards=6, consumers=4)
    live = [start(name) for name in ("first", "second", "third")]
    settle()
    deaths: dict[int, float] = {}
    ends: dict[int, Position] = {}
    # 16 threads, each a transaction of 2 to 8 messages (mostly of one key) every 0.5 s,
    # committing up to 20 ms after their appends: ~150 messages a second, out of order.
    writer = KeyedWriter(
        url,
        PUBLICATION,
        keys=KEYS,
        cap=50_000,
        interval=0.5,
        seed=20,
        threads=16,
        commit_delay=0.02,
    )
    with writer:
        wait_for_progress(url, 200)
        killed = live.pop(1)
        killed.kill()
        deaths[killed.pid] = time.monotonic()
        say(f"killed {killed.name}")
        settle()
        live.append(start("second-again"))
        settle()

        wait_for_progress(url, 150)
        stopped = live.pop(0)
        stop_gracefully(url, stopped)
        say(f"stopped {stopped.name}")
        settle()
        live.append(start("first-again"))
        settle()

        wait_for_progress(url, 150)
        live.append(start("fourth"))
        settle()
        wait_for_progress(url, 150)
        stop_gracefully(url, live.pop())
        say("the fourth left")
        settle()

        wait_for_progress(url, 150)
        outbox_succeeds(url, "subscription", "update", SUBSCRIPTION, "--consumers", "2")
        wait_until(lambda: applied_consumers(url, SUBSCRIPTION, 2), 30, "2 consumers a shard")
        say("2 consumers")

        bursts = []
        for old, new in ((6, 4), (4, 7)):
            wait_for_progress(url, 150)
            ends[old], burst = change_shard_count_under_a_burst(url, new, seed=30 + new)
            bursts.append(burst)
            say(f"{new} shards")
            settle()
        wait_for_progress(url, 150)
        written = writer.stop()
    for burst in bursts:
        written.add(sorted(burst.committed), committed=True)
        written.add(sorted(burst.rolled_back), committed=False)
    say(f"{writer.count} written")
    wait_for_drain(url)
    say("drained")
    for daemon in live:
        stop_gracefully(url, daemon)

    rows = check_run(url, written, deaths, ends)
    say(f"{len(rows)} deliveries of {len(written.committed)} messages checked")
    assert not [line for d in daemons.started for line in d.errors()], daemons.logs()
    # The faults landed mid-flight: the killed process left handlers unfinished, or its
    # messages were delivered again by whoever took its shards.
    delivered = Counter(row.position for row in rows if row.outcome == "ack")
    assert any(row.finished_monotonic is None for row in rows) or max(delivered.values()) > 1
    # Every process that was up while messages flowed delivered some.
    assert {row.pid for row in rows} == {d.pid for d in daemons.started}


# Fencing ------------------------------------------------------------------------------------


def terminate_lease_sessions(url: str, pid: int) -> dict[tuple[int, int], int]:
    """pg_terminate_backend the sessions of the shard leases process `pid` holds; the token
    each of those shards had."""
    held = [lease for lease in shard_leases(url, SUBSCRIPTION) if lease.pid == pid and lease.alive]
    assert held, f"process {pid} leads no shard"
    with psycopg.connect(url, autocommit=True) as conn:
        terminated = conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE application_name = ANY(%s)",
            ([lease.holder for lease in held],),
        ).fetchall()
    assert terminated, f"no session of process {pid}'s leases was found"
    return {(lease.shard_count, lease.shard): lease.token for lease in held}


def in_new_terms(url: str, tokens: dict[tuple[int, int], int]) -> bool:
    """Whether each of these shards has an alive lease with a later token than it had."""
    leases = {(s.shard_count, s.shard): s for s in shard_leases(url, SUBSCRIPTION)}
    return all(
        (lease := leases.get(unit)) is not None and lease.alive and lease.token > token
        for unit, token in tokens.items()
    )


def frozen_deliveries(
    rows: list[Delivery], pid: int, paused: float, resumed: float, led_again: float
) -> set[int]:
    """The deliveries SIGSTOP froze in process `pid`: those running when it stopped, and on
    each handler thread the first one started after it resumed but before the process led a
    shard again (a delivery its thread had taken before the stop, whose handler only read the
    clock after it). Their handlers really run on after the resume, when another process may
    hold their keys: the limit the README names (a handler that outlives its leader's lease
    can overlap its successor), which no daemon can close. Times: monotonic, except `led_again`,
    the database's clock as time.time()."""
    frozen = {
        row.id
        for row in rows
        if row.pid == pid
        and row.started_monotonic < paused
        and (row.finished_monotonic is None or row.finished_monotonic > paused)
    }
    threads: dict[str, list[Delivery]] = defaultdict(list)
    for row in rows:
        if row.pid == pid and row.started_monotonic > resumed:
            threads[row.thread].append(row)
    for deliveries in threads.values():
        first = min(deliveries, key=lambda row: row.started_monotonic)
        if first.started_at < led_again:
            frozen.add(first.id)
    return frozen


@pytest.mark.slow
def test_cut_sessions_and_a_stopped_process_never_leave_a_key_in_two_handlers(
    database_url: str, daemons: DaemonGroup
) -> None:
    url = database_url
    create_sharded(url, shards=4, consumers=4)
    # A backlog, so every leader holds a full buffer when its sessions are cut.
    write_keyed_messages(url, PUBLICATION, 1500, keys=60, seed=21)
    backlog = {m.at.position for m in committed_messages(url, PUBLICATION)}
    first, second = (
        daemons.start(SUBSCRIPTION, *DAEMON_OPTIONS, handler=HANDLER, name=name)
        for name in ("first", "second")
    )
    pids = {first.pid, second.pid}
    wait_for_assignment(url, SUBSCRIPTION, pids, 60)
    writer = KeyedWriter(
        url,
        PUBLICATION,
        keys=60,
        cap=50_000,
        interval=0.2,
        seed=22,
        threads=4,
        commit_delay=0.02,
    )
    with writer:
        for cut in (first, second, first):
            wait_for_progress(url, 150)
            tokens = terminate_lease_sessions(url, cut.pid)
            wait_until(
                functools.partial(in_new_terms, url, tokens),
                30,
                f"the shards of {cut.name}'s cut sessions to be led again",
            )
            wait_for_assignment(url, SUBSCRIPTION, pids)

        wait_for_progress(url, 150)
        held = {s for s, pid in current_leaders(url, SUBSCRIPTION).items() if pid == first.pid}
        earlier_leases = len(shard_lease_changes(url, SUBSCRIPTION))
        first.pause()
        paused = time.monotonic()
        wait_for_assignment(url, SUBSCRIPTION, {second.pid})
        # The stopped process's shards moved, and their checkpoints moved on under their new
        # leader, while the stopped one still believes it leads.
        before = len(shard_checkpoint_changes(url, SUBSCRIPTION))
        wait_until(
            lambda: len(shard_checkpoint_changes(url, SUBSCRIPTION)) > before + 10,
            30,
            "checkpoints under the new leader",
        )
        first.resume()
        resumed = time.monotonic()
        wait_for_assignment(url, SUBSCRIPTION, pids)
        wait_for_progress(url, 150)
        written = writer.stop()
    written.add(sorted(backlog), committed=True)
    wait_for_drain(url)
    stop_gracefully(url, first)
    stop_gracefully(url, second)

    # The shards moved after the stopped process's leases ran out, never before (its
    # sessions stayed open: only the expiry frees them).
    changes = shard_lease_changes(url, SUBSCRIPTION)[earlier_leases:]
    moved = [n for n, c in enumerate(changes) if (c.old_pid, c.pid) == (first.pid, second.pid)]
    assert {changes[n].shard for n in moved} >= held, changes
    for change in (changes[n] for n in moved):
        assert change.since >= change.old_expires_at, f"taken before it expired: {change}"
    # When the resumed process led a shard again: its first lease after those moves.
    led_again = min(c.since.timestamp() for c in changes[moved[-1] :] if c.pid == first.pid)
    rows = read_deliveries(url)
    frozen = frozen_deliveries(rows, first.pid, paused, resumed, led_again)
    messages = committed_messages(url, PUBLICATION)
    parked = parked_times(url, SUBSCRIPTION)
    check_nothing_lost(rows, messages, written, parked, MAX_RETRY_COUNT)
    check_key_order(rows, messages, set(parked), MAX_RETRY_COUNT)
    check_one_handler_per_key(rows, {}, frozen)
    # The zombie's writes after it woke up: refused, so none shows up as a move by a session
    # that no longer held its shard's lease, nor as a checkpoint moving back.
    check_shard_checkpoints(shard_checkpoint_changes(url, SUBSCRIPTION), rows, messages, parked, {})
    check_floor(subscription_changes(url, SUBSCRIPTION), rows, messages, parked)
    print(f"{len(frozen)} deliveries frozen by SIGSTOP, {len(rows)} in all")


# Balance ------------------------------------------------------------------------------------


@pytest.mark.slow
def test_three_processes_lead_four_of_twelve_shards_each_and_keep_them(
    database_url: str, daemons: DaemonGroup
) -> None:
    url = database_url
    create_sharded(url, shards=12, consumers=1)
    started = [
        daemons.start(SUBSCRIPTION, *DAEMON_OPTIONS, handler=HANDLER, name=name)
        for name in ("first", "second", "third")
    ]
    pids = {d.pid for d in started}
    wait_until(lambda: set(live_members(url, SUBSCRIPTION)) == pids, 60, "three members")
    joined = time.monotonic()
    # A few lease periods: a member's shards are free at once when it joins first, or once
    # their holder handed them over (its handlers finished, its checkpoint written).
    assignment = wait_for_assignment(url, SUBSCRIPTION, pids, 3 * LEASE_SECONDS)
    print(f"balanced {time.monotonic() - joined:.2f} s after the third process joined")
    assert Counter(assignment.values()) == dict.fromkeys(pids, 4), assignment
    # Then nothing changes for three lease periods: the same leader and the same term (token)
    # for every shard, sampled every 50 ms.
    held = {(s.shard, s.pid, s.token) for s in shard_leases(url, SUBSCRIPTION)}
    assert len(held) == 12, held
    observed_until = time.monotonic() + 3 * LEASE_SECONDS
    while time.monotonic() < observed_until:
        leases = shard_leases(url, SUBSCRIPTION)
        assert {(s.shard, s.pid, s.token) for s in leases} == held, leases
        assert all(lease.alive for lease in leases), leases
        time.sleep(0.05)
    assert all(d.alive() for d in started)
    assert not [line for d in started for line in d.errors()], daemons.logs()
