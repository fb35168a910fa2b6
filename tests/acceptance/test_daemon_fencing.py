"""No key in two processes at once: a leader whose database sessions were terminated keeps
buffered messages, and a standby takes over the moment those sessions are gone. The leader's
self-fencing (it starts nothing once its lease may have run out) and the new leader's wait
for the old lease (poller/daemon/term/self_fence.py) keep the two apart; this drives that race
again and again with handlers recording start and end on the machine-wide monotonic clock."""

import itertools
import time
from collections import defaultdict
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import psycopg
import pytest

from tests.support.daemons import DaemonGroup, daemon_group, wait_until
from tests.support.databases import probe
from tests.support.keyed_handler import create_deliveries_table, handler_intervals
from tests.support.stored import (
    Leader,
    create_subscription,
    current_leader,
    delivery_order,
    stored_checkpoint,
)
from tests.support.writers import write_keyed_messages

SLOW_HANDLER = "tests.support.keyed_handler:handle_slowly"
TERMINATIONS = 5
# Which process wins a takeover is a race (the cut leader retakes its own lease as soon as its
# handlers are quiet): after the first TERMINATIONS rounds, a leader is cut until the other
# process leads, and rounds go on until both processes have run handlers, up to this many.
MAX_TERMINATIONS = 30
# Messages not yet acked at the start of every round: more than a leader buffers (buffer_size,
# 1,000 by default) plus what it handles in the round's second, so each cut leader holds a
# full buffer, as it did with the 4,500 written up front. Those were 4,500 because a run may
# take many rounds; the usual five used ~600 of them and the test then spent ~40 s draining
# the rest after the last cut. Topping up before each round keeps every cut as loaded and
# leaves ~1,500 to drain.
BACKLOG = 1500


@pytest.fixture
def daemons(database_url: str, tmp_path: Path) -> Iterator[DaemonGroup]:
    create_deliveries_table(database_url)
    with daemon_group(database_url, tmp_path) as group:
        yield group


def terminate_sessions_of(url: str, holder: str) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s",
            (holder,),
        ).fetchall()
    return len(rows)


def unacked(url: str) -> int:
    """Committed messages without an acked delivery yet (waiting, buffered or in flight)."""
    row = (
        probe(url)
        .execute(
            "SELECT (SELECT count(*) FROM outbox.messages)"
            " - (SELECT count(DISTINCT position) FROM deliveries WHERE outcome = 'ack')"
        )
        .fetchone()
    )
    assert row is not None
    return int(row[0])


def taken_over(url: str, leader: Leader) -> bool:
    now = current_leader(url, "cg")
    return now is not None and now.token > leader.token


def led_by_another(url: str, leader: Leader) -> bool:
    """True once another process leads; until then `leader`'s sessions are cut again."""
    now = current_leader(url, "cg")
    if now is not None and now.holder != leader.holder:
        return True
    terminate_sessions_of(url, leader.holder)
    return False


@pytest.mark.slow
def test_terminated_leader_sessions_never_leave_a_key_in_two_processes(
    database_url: str, daemons: DaemonGroup
) -> None:
    create_subscription(
        database_url, "cg", "orders", strategy="pinned", consumers=8, max_retry_count=50
    )
    write_keyed_messages(database_url, "orders", BACKLOG, keys=40, seed=11)
    options = ("--lease-seconds", "2", "--standby-poll", "0.05")
    for _ in range(2):
        daemons.start("cg", *options, handler=SLOW_HANDLER)

    for round_number in itertools.count():
        handler_pids = {interval.pid for interval in handler_intervals(database_url)}
        if round_number >= TERMINATIONS and len(handler_pids) == 2:
            break
        assert round_number < MAX_TERMINATIONS, (
            f"only process {handler_pids} ran handlers after {round_number} terminations"
        )
        if (missing := BACKLOG - unacked(database_url)) > 0:
            write_keyed_messages(database_url, "orders", missing, keys=40, seed=12 + round_number)
        leader = wait_until(lambda: current_leader(database_url, "cg"), 30, "a leader")
        # Let the term fill its buffer and run handlers, then cut its sessions mid-stream.
        time.sleep(1.0)
        assert terminate_sessions_of(database_url, leader.holder), f"round {round_number}"

        if round_number < TERMINATIONS:
            # The race: one cut, and whichever process wins the takeover leads.
            wait_until(partial(taken_over, database_url, leader), 30, "a takeover")
        else:
            # One process won every race so far: cut it each time it comes back, until its
            # lease runs out and the standby leads (its buffered messages still held, as in
            # every round), so both processes have run handlers in the end.
            wait_until(partial(led_by_another, database_url, leader), 30, "the standby to lead")

    last = delivery_order(database_url, "orders")[-1]
    wait_until(
        lambda: stored_checkpoint(database_url, "cg") >= last,
        180,
        "the backlog to drain",
    )

    intervals = wait_until(
        lambda: (
            rows
            if (rows := handler_intervals(database_url))
            and all(row.finished is not None for row in rows)
            else None
        ),
        30,
        "every handler to finish",
    )
    assert len({i.pid for i in intervals}) == 2, "both processes led at some point"
    by_key: dict[str | None, list[tuple[float, float, int]]] = defaultdict(list)
    for interval in intervals:
        assert interval.finished is not None
        by_key[interval.partition_key].append((interval.started, interval.finished, interval.pid))
    for key, runs in by_key.items():
        runs.sort()
        for earlier, later in itertools.pairwise(runs):
            assert earlier[1] <= later[0], (
                f"key {key}: pid {later[2]} started it at {later[0]:.4f} while pid {earlier[2]}"
                f" ran it until {earlier[1]:.4f}"
            )
