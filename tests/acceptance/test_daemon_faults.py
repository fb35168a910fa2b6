"""The poller daemon under faults: kill -9 at random moments, its sessions terminated by the
server. Writers keep committing out of order throughout; nothing may be lost, and messages
are delivered again only above the checkpoint stored when the fault hit (at-least-once)."""

import itertools
import random
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from outbox.positions import START, Position
from outbox_cli.demo.workload import WorkloadShape
from poller.daemon.options import DaemonOptions
from tests.support.daemons import (
    Daemon,
    DaemonGroup,
    Handled,
    assert_resumed_exactly_after,
    count_handled_by,
    create_handled_table,
    daemon_backend_pids,
    daemon_group,
    handled_rows,
    terminate_daemon_backends,
    wait_for_all_handled,
    wait_for_deliveries,
    wait_until,
)
from tests.support.stored import (
    create_subscription,
    current_leader,
    delivery_order,
    stored_checkpoint,
)
from tests.support.writers import (
    WorkloadLoop,
)

# Checkpoints are batched: a crash re-delivers what finished after the last stored one, at
# most max_checkpoint_count messages plus the slot's run in flight (one consumer, one slot):
# its acks reach the machine at the run's end or the next tick.
# Small, so that a term delivers several batches before its kill: a daemon that stored no
# checkpoint (or stored it late) would re-deliver whole terms and break the bound.
MAX_CHECKPOINT_COUNT = 20
IN_FLIGHT = DaemonOptions().prefetch
# A long lease, so that a leader starved of CPU on a busy machine does not lose it between
# renewals; a killed leader is replaced at once anyway (its session is gone).
LONG_LEASE = ("--lease-seconds", "8")
# The kill test's lease. A successor takes the lease at once but starts delivering only once
# the killed leader's lease has run out (self_fence), so each of the ten kills waits out the
# whole lease: 8 s made the test ~80 s of waiting. With 3 s a leader renews every 0.75 s and
# fences itself 2.25 s after the last renewal it sent; sampled during these fault tests on a
# two-core machine, renewals came at most 0.1 s later than due (0.8 s apart). Every leader
# is checked to have led exactly one term, so a lease lost to a starved leader fails the
# test rather than passing unnoticed.
KILL_LEASE = ("--lease-seconds", "3")
# Four of the demo's out-of-order writers, round after round while the faults happen.
WRITERS = WorkloadShape(writers=4, transactions_per_writer=10, max_commit_delay=0.1, seed=1000)


@pytest.fixture
def daemons(database_url: str, tmp_path: Path) -> Iterator[DaemonGroup]:
    create_handled_table(database_url)
    with daemon_group(database_url, tmp_path) as group:
        yield group


def leading_daemon(url: str, pool: list[Daemon]) -> Daemon | None:
    """The daemon of `pool` that holds the lease and has delivered a message, if any."""
    lease = current_leader(url, "sub")
    for daemon in pool:
        if lease is not None and daemon.pid == lease.pid and daemon.alive():
            return daemon if count_handled_by(url, daemon.pid) > 0 else None
    return None


@pytest.mark.slow
def test_kill_9_at_random_moments_loses_nothing_and_redelivers_only_past_the_checkpoint(
    database_url: str, daemons: DaemonGroup
) -> None:
    kills = 10
    create_subscription(database_url, "sub", "pub", max_checkpoint_count=MAX_CHECKPOINT_COUNT)
    seed = random.randrange(2**32)
    rng = random.Random(seed)
    # A restart is a fresh process; three are kept started ahead (standing by), because an
    # import of the CLI takes seconds on a busy machine and the run should not wait for it.
    pool = [daemons.start("sub", *KILL_LEASE) for _ in range(4)]
    leaders: list[Daemon] = []
    with WorkloadLoop(database_url, "pub", WRITERS) as workload:
        for _ in range(kills):
            leader = wait_until(lambda: leading_daemon(database_url, pool), 60, "a new leader")
            leaders.append(leader)
            wait_for_deliveries(database_url, leader, 2 * MAX_CHECKPOINT_COUNT)
            # A random moment of its term: mid-delivery, mid-checkpoint, between reads...
            time.sleep(rng.uniform(0.0, 0.5))
            leader.kill()
            pool.remove(leader)
            if len(daemons.started) <= kills:  # one leader per kill, and one at the end
                pool.append(daemons.start("sub", *KILL_LEASE))
        last = wait_until(lambda: leading_daemon(database_url, pool), 60, "the last leader")
        leaders.append(last)
        written = workload.stop()
    wait_for_all_handled(database_url, written.committed)
    assert last.terminate() == 0, daemons.logs()
    assert not [line for d in daemons.started for line in d.errors()], daemons.logs()

    rows = handled_rows(database_url)
    order = delivery_order(database_url, "pub")
    assert {p.position for p in order} == written.committed
    assert {row.position for row in rows} == written.committed, "lost or invented messages"
    assert not {row.position for row in rows} & written.rolled_back
    assert {row.pid for row in rows} <= {d.pid for d in leaders}, "a standby delivered"

    # Each leader had one term, which started from the checkpoint stored when its
    # predecessor was killed (the lease passes only once the killed session is gone).
    starts = []
    for leader in leaders:
        terms = leader.terms("sub")
        assert len(terms) == 1, f"{leader.name} led {len(terms)} times:\n{daemons.logs()}"
        starts.append(terms[0])
    by_leader = {d.pid: [row.at for row in rows if row.pid == d.pid] for d in leaders}
    for leader, start in zip(leaders, starts, strict=True):
        assert_resumed_exactly_after(order, start, by_leader[leader.pid], leader.name)
    assert starts == sorted(starts), f"the checkpoint moved back: {starts}"
    redelivered = 0
    for previous, start in zip(leaders, starts[1:], strict=False):
        before = by_leader[previous.pid]
        assert start <= before[-1], "the checkpoint passed a message that was never handled"
        # Redelivered later: what the killed leader handled above the stored checkpoint.
        redelivered += sum(1 for at in before if at > start)

    counts = Counter(row.position for row in rows)
    duplicates = sum(n - 1 for n in counts.values())
    assert duplicates == redelivered
    assert duplicates <= kills * (MAX_CHECKPOINT_COUNT + IN_FLIGHT), (
        f"{duplicates} duplicates after {kills} kills (seed {seed})"
    )
    # Every duplicate was delivered again only by a leader whose stored starting checkpoint
    # lay below it: nothing at or below a stored checkpoint is ever delivered again.
    handled_before: set[Position] = set()
    for leader, start in zip(leaders, starts, strict=True):
        mine = by_leader[leader.pid]
        assert all(at > start for at in mine if at in handled_before)
        handled_before.update(mine)
    # The last leader stopped gracefully: its final checkpoint is the last message.
    assert stored_checkpoint(database_url, "sub") == order[-1]


ROUNDS = 3


def descents(delivered: list[Position]) -> int:
    """How often the delivered sequence steps back (a new term re-delivering)."""
    return sum(1 for a, b in itertools.pairwise(delivered) if b <= a)


@pytest.mark.slow
def test_terminated_sessions_are_reconnected_and_nothing_is_lost(
    database_url: str, daemons: DaemonGroup
) -> None:
    create_subscription(database_url, "sub", "pub", max_checkpoint_count=MAX_CHECKPOINT_COUNT)
    daemon = daemons.start("sub", *LONG_LEASE)
    daemon.leading_from("sub")
    with WorkloadLoop(database_url, "pub", WRITERS) as workload:
        for round_number in range(1, ROUNDS + 1):
            # Past a checkpoint (every MAX_CHECKPOINT_COUNT) and a bit beyond.
            handled = count_handled_by(database_url, daemon.pid)
            wait_for_deliveries(database_url, daemon, handled + MAX_CHECKPOINT_COUNT + 30)
            terminated = set(terminate_daemon_backends(database_url))
            assert terminated, "no daemon session to terminate"
            # It reconnects (backoff), takes its lease again and delivers on.
            daemon.wait_for_terms("sub", round_number + 1)

            def new_sessions(gone: set[int] = terminated) -> set[int]:
                return set(daemon_backend_pids(database_url)) - gone

            wait_until(
                new_sessions,
                30,
                "new daemon sessions",
            )
        wait_for_deliveries(database_url, daemon, count_handled_by(database_url, daemon.pid) + 1)
        written = workload.stop()
    wait_for_all_handled(database_url, written.committed)
    assert daemon.alive(), daemons.logs()
    log = daemon.log()
    assert log.count("connection lost while leading sub") == ROUNDS, log
    assert daemon.terminate() == 0, log
    assert not daemon.errors(), log

    rows: list[Handled] = handled_rows(database_url)
    order = delivery_order(database_url, "pub")
    assert {row.position for row in rows} == written.committed, "lost or invented messages"
    assert not {row.position for row in rows} & written.rolled_back
    # Within a term each message is the next committed one; a new term goes on with the
    # message after its stored checkpoint, stepping back at most once per fault.
    starts = daemon.terms("sub")
    assert len(starts) == ROUNDS + 1
    assert starts == sorted(starts), "the checkpoint moved back"
    successor = dict(itertools.pairwise([START, *order]))
    term_firsts = {successor[start] for start in starts}
    delivered = [row.at for row in rows]
    assert delivered[0] == order[0]
    for previous, message in itertools.pairwise(delivered):
        assert message == successor.get(previous) or message in term_firsts, (
            f"{message} delivered after {previous}: a gap or a reordering"
        )
    assert descents(delivered) <= ROUNDS
    duplicates = len(rows) - len(written.committed)
    assert duplicates <= ROUNDS * (MAX_CHECKPOINT_COUNT + IN_FLIGHT)
    assert stored_checkpoint(database_url, "sub") == order[-1]
