"""Two daemons for one subscription: one leads, the other stands by; a killed leader is
replaced once its lease has run out, a paused one is fenced out when it wakes up."""

import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from outbox.positions import START, Position
from outbox.queries import QUERIES
from tests.support.daemons import (
    SLOW_HANDLER,
    DaemonGroup,
    assert_resumed_exactly_after,
    count_handled_by,
    create_handled_table,
    daemon_group,
    handled_rows,
    wait_for_all_handled,
    wait_for_deliveries,
    wait_until,
)
from tests.support.samplers import (
    checkpoint_log,
)
from tests.support.stored import (
    Leader,
    create_subscription,
    current_leader,
    delivery_order,
    stored_checkpoint,
)
from tests.support.writers import (
    ContinuousWriter,
)

# The daemon's default lease (8 s before: every second of it is a second the test waits for
# the takeover). A takeover before it expired can only come from noticing that the killed
# leader's session is gone (its deliveries then wait out that lease), and the standby polls
# every 0.5 s, so 4 s still tells a takeover at once from one at the lease's end.
LEASE_SECONDS = 4
LONG_LEASE = ("--lease-seconds", str(LEASE_SECONDS))
# Checkpoints written often, so that a takeover has something recent to resume from.
FREQUENT_CHECKPOINTS = {"checkpoint_after": 0.2, "min_checkpoint_count": 1}


@pytest.fixture
def daemons(database_url: str, tmp_path: Path) -> Iterator[DaemonGroup]:
    create_handled_table(database_url)
    with daemon_group(database_url, tmp_path) as group:
        yield group


@pytest.mark.slow
def test_one_of_two_daemons_delivers_and_the_standby_replaces_a_killed_leader_after_its_lease(
    database_url: str, daemons: DaemonGroup
) -> None:
    create_subscription(database_url, "sub", "pub", **FREQUENT_CHECKPOINTS)
    first = daemons.start("sub", *LONG_LEASE, name="first")
    assert first.leading_from("sub") == START
    second = daemons.start("sub", *LONG_LEASE, name="second")
    second.wait_for_log(r"sub has a leader; standing by", 60)

    with ContinuousWriter(database_url, "pub") as writer:
        # A window of deliveries with both daemons up: only the leader delivers.
        window_start = len(handled_rows(database_url))
        wait_for_deliveries(database_url, first, count_handled_by(database_url, first.pid) + 100)
        window = handled_rows(database_url)[window_start:]
        assert {row.pid for row in window} == {first.pid}
        assert count_handled_by(database_url, second.pid) == 0

        killed_lease = current_leader(database_url, "sub")
        assert killed_lease is not None
        assert killed_lease.pid == first.pid
        killed_at = time.monotonic()
        first.kill()
        wait_for_deliveries(database_url, second, 1)
        takeover = time.monotonic() - killed_at
        taken = current_leader(database_url, "sub")
        wait_for_deliveries(database_url, second, 100)
        committed = writer.stop()
    # The lease is taken at once (the killed leader's session is gone), but deliveries wait
    # until that lease has run out: a leader cut off rather than killed may still be starting
    # deliveries until then (poller/daemon/term/self_fence.py). So: at most one lease, plus a poll.
    assert takeover < LEASE_SECONDS + 3, (
        f"the standby delivered {takeover:.2f} s after the leader was killed"
    )
    assert taken is not None
    assert taken.pid == second.pid
    assert taken.token == killed_lease.token + 1
    assert taken.since < killed_lease.expires_at, "taken before the lease ran out"
    first_by_second = min(
        row.handled_at for row in handled_rows(database_url) if row.pid == second.pid
    )
    assert first_by_second >= killed_lease.expires_at, "delivered before the old lease ran out"
    wait_for_all_handled(database_url, committed)
    assert second.terminate() == 0, daemons.logs()

    rows = handled_rows(database_url)
    order = delivery_order(database_url, "pub")
    assert {row.position for row in rows} == committed == {at.position for at in order}
    by_first = [row.at for row in rows if row.pid == first.pid]
    by_second = [row.at for row in rows if row.pid == second.pid]
    assert_resumed_exactly_after(order, START, by_first, "the first leader")
    # The standby resumed from the checkpoint the killed leader had stored, which covered
    # only messages it had delivered: nothing skipped, re-delivered only above it.
    start = second.leading_from("sub")
    assert START < start <= by_first[-1]
    assert_resumed_exactly_after(order, start, by_second, "the standby")
    assert len(rows) - len(committed) == sum(1 for at in by_first if at > start)
    assert stored_checkpoint(database_url, "sub") == order[-1] == by_second[-1]
    assert not first.errors() + second.errors(), daemons.logs()


def zombie_checkpoint_write(url: str, lease: Leader, at: Position) -> bool:
    """The daemon's own checkpoint write (sql/queries.sql), as the holder of `lease` would
    make it; whether it was stored."""
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            QUERIES["write_checkpoint"],
            {
                "subscription": "sub",
                "holder": lease.holder,
                "token": lease.token,
                "shard_count": 1,
                "shard": 0,
                "epoch": 0,
                "transaction_id": str(at.transaction_id),
                "position": at.position,
                "runtime": "{}",
            },
        ).fetchone()
    return row is not None


@pytest.mark.slow
def test_a_paused_leader_is_fenced_out_by_the_new_leaders_token(
    database_url: str, daemons: DaemonGroup
) -> None:
    create_subscription(database_url, "sub", "pub", **FREQUENT_CHECKPOINTS)
    lease = ("--lease-seconds", "2")
    # Handlers that take a few ms: the pause likely catches one in flight.
    old = daemons.start("sub", *lease, handler=SLOW_HANDLER, name="old-leader")
    old.leading_from("sub")
    new = daemons.start("sub", *lease, handler=SLOW_HANDLER, name="new-leader")
    new.wait_for_log(r"sub has a leader; standing by", 60)
    old_lease = current_leader(database_url, "sub")
    assert old_lease is not None
    assert old_lease.pid == old.pid
    far_ahead = Position(2**62, 2**62)

    writer = ContinuousWriter(database_url, "pub")
    with checkpoint_log(database_url, "sub") as log, writer:
        wait_for_deliveries(database_url, old, 50)
        old.pause()  # SIGSTOP: its session stays open, so only the lease expiry frees it

        def new_lease() -> Leader | None:
            leader = current_leader(database_url, "sub")
            return leader if leader is not None and leader.pid == new.pid else None

        taken = wait_until(new_lease, 30, "the standby to take the expired lease")
        start = new.leading_from("sub")
        # The write a zombie makes when it wakes up: its own progress, with its old token.
        assert not zombie_checkpoint_write(database_url, old_lease, far_ahead)
        wait_until(
            lambda: stored_checkpoint(database_url, "sub") > start,
            30,
            "the new leader to store a checkpoint",
        )

        old.resume()  # SIGCONT: the zombie wakes up believing it leads
        # Its fence lapsed while it slept, or its renewal finds the new token: either way.
        old.wait_for_log(r"lost leadership of sub \(.+\); standing by", 30)
        zombie_deliveries = count_handled_by(database_url, old.pid)
        wait_for_deliveries(database_url, new, count_handled_by(database_url, new.pid) + 50)
        committed = writer.stop()
        samples = log.stop()
    wait_for_all_handled(database_url, committed)

    # The zombie delivered nothing more once it knew, but the one that was in flight.
    assert count_handled_by(database_url, old.pid) <= zombie_deliveries + 1
    assert taken.token == old_lease.token + 1
    assert taken.holder != old_lease.holder

    # The checkpoint, as sampled every 20 ms: never backwards...
    checkpoints = [sample.checkpoint for sample in samples]
    assert checkpoints == sorted(checkpoints), "the checkpoint moved back"
    # ...one takeover, and the lease never went back to the zombie...
    holders = [(s.token, s.holder) for s in samples]
    first_new = holders.index((taken.token, taken.holder))
    assert set(holders[:first_new]) == {(old_lease.token, old_lease.holder)}
    assert set(holders[first_new:]) == {(taken.token, taken.holder)}
    # ...and what the fencing token guarantees: once the new token was issued, every stored
    # checkpoint was the new leader's, a message it had itself delivered before it was
    # stored. A zombie write (its own progress, possibly ahead of the new leader) would show
    # up here as a checkpoint the new leader had not delivered yet.
    delivered_by_new = {
        row.at: row.handled_at for row in handled_rows(database_url) if row.pid == new.pid
    }
    after_takeover = [s for s in samples[first_new:] if s.checkpoint != start]
    assert after_takeover, "no checkpoint was written after the takeover"
    for sample in after_takeover:
        delivered_at = delivered_by_new.get(sample.checkpoint)
        assert delivered_at is not None, f"{sample.checkpoint} was stored, not by the new leader"
        assert delivered_at <= sample.observed_at

    # Both stop gracefully; the survivor's final checkpoint is its last message.
    assert old.terminate() == 0, daemons.logs()
    assert new.terminate() == 0, daemons.logs()
    rows = handled_rows(database_url)
    order = delivery_order(database_url, "pub")
    assert {row.position for row in rows} == committed == {at.position for at in order}
    by_new = [row.at for row in rows if row.pid == new.pid]
    assert_resumed_exactly_after(order, start, by_new, "the new leader")
    assert stored_checkpoint(database_url, "sub") == order[-1] == by_new[-1]
    assert not old.errors() + new.errors(), daemons.logs()
