"""A handler call that runs past --shutdown-timeout while its shard changes hands or drains,
with no fault anywhere: a process joins, or the shard count changes. The shard stays with the
process that runs the call, its lease renewed, until the call returns, so no key ever runs in
two handlers at once; and a call that has returned is not reported at exit as one the
shutdown gave up on."""

import itertools
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

import outbox
from outbox.shards import message_shard
from tests.support.cli import outbox_succeeds
from tests.support.daemons import Daemon, DaemonGroup, daemon_group, wait_until
from tests.support.databases import probe
from tests.support.gated_handler import create_gate_tables, gated_rows, open_gate
from tests.support.shards import shard_leases

pytestmark = pytest.mark.slow

HANDLER = "tests.support.gated_handler:handle"
# Far below the time the held calls run: before the fix the stop gave up on them after it.
OPTIONS = ("--shutdown-timeout", "1", "--lease-seconds", "2")
WAITING = "waiting for handler calls to return before the term ends"


@pytest.fixture
def daemons(database_url: str, tmp_path: Path) -> Iterator[DaemonGroup]:
    create_gate_tables(database_url)
    with daemon_group(database_url, tmp_path) as group:
        yield group


def create(url: str, shards: int) -> None:
    outbox_succeeds(
        url,
        *("subscription", "create", "sub", "--publication", "orders", "--from", "start"),
        *("--strategy", "pinned", "--consumers", "2", "--shards", str(shards)),
        *("--checkpoint-after", "0.1", "--min-checkpoint-count", "1"),
    )


def key_in_shard(shard: int, shards: int) -> str:
    return next(key for n in range(1000) if message_shard(key := f"key-{n}", 0, shards) == shard)


def append_held_then_next(url: str, keys: list[str]) -> dict[str, list[int]]:
    """Per key: a message its handler holds until the test opens its gate, then one more."""
    positions: dict[str, list[int]] = {}
    with psycopg.connect(url, autocommit=True) as conn:
        for key in keys:
            held = outbox.append(conn, "orders", "T", {"hold": True}, partition_key=key)
            after = outbox.append(conn, "orders", "T", {"hold": False}, partition_key=key)
            positions[key] = [held, after]
    return positions


def started(url: str, position: int) -> int:
    return len(gated_rows(url).get(position, []))


def assert_one_call_per_key_at_a_time(url: str, positions: dict[str, list[int]]) -> None:
    """Per key, each call started after the one before it returned (a message may have been
    delivered again after a term's end: at least once, but never beside itself)."""
    rows = gated_rows(url)
    for key, (held, after) in positions.items():
        calls = sorted(rows[held] + rows[after])
        for (_, finished), (next_started, _) in itertools.pairwise(calls):
            assert finished is not None, f"{key}: a call never returned"
            assert next_started >= finished, (
                f"{key}: a call started at {next_started} while another ran until {finished}"
            )


def wait_for_calls_started(url: str, positions: list[int]) -> None:
    wait_until(lambda: all(started(url, p) for p in positions), 30, "the held calls to start")


def test_a_shard_moves_to_a_joining_process_only_once_its_running_call_returned(
    database_url: str, daemons: DaemonGroup
) -> None:
    create(database_url, 2)
    # One held key in each shard: whichever shard the assignment moves, a call of it runs.
    positions = append_held_then_next(database_url, [key_in_shard(0, 2), key_in_shard(1, 2)])
    held = [p[0] for p in positions.values()]
    first = daemons.start("sub", *OPTIONS, handler=HANDLER, name="first")
    wait_for_calls_started(database_url, held)
    second = daemons.start("sub", *OPTIONS, handler=HANDLER, name="second")
    first.wait_for_log("goes to another process", 30)
    # Past --shutdown-timeout the first process still holds the shard, or (before the fix)
    # the second has started the held message beside the call that runs it.
    wait_until(
        lambda: WAITING in first.log() or any(started(database_url, p) > 1 for p in held),
        30,
        "the first process to wait for its call, or the second to start it",
    )
    assert all(started(database_url, p) == 1 for p in held), daemons.logs()
    for position in held:
        open_gate(database_url, position)
    second.wait_for_log("leading sub from", 30)
    wait_until(
        lambda: all(started(database_url, p[1]) for p in positions.values()),
        30,
        "every message",
    )
    assert_one_call_per_key_at_a_time(database_url, positions)
    assert_clean_exit(first, daemons)
    assert_clean_exit(second, daemons)


def test_a_term_whose_shard_drains_after_a_count_change_keeps_its_running_call(
    database_url: str, daemons: DaemonGroup
) -> None:
    """The term runs on through the change, its reads held at the barrier, and delivers the
    key's next message (before the barrier) once the held call returns; the new shards wait
    for it. It restarted at the change, before: it waited for the call past its shutdown
    timeout, and handed back what had not started (its successor delivered again what other
    keys had finished after it)."""
    create(database_url, 1)
    positions = append_held_then_next(database_url, ["key-a"])
    [(held, after)] = positions.values()
    only = daemons.start("sub", *OPTIONS, handler=HANDLER, name="only")
    wait_for_calls_started(database_url, [held])
    outbox_succeeds(database_url, "subscription", "update", "sub", "--shards", "3")
    only.wait_for_log("delivers up to the barrier, then restarts", 30)
    wait_until(
        lambda: len([s for s in shard_leases(database_url, "sub") if s.shard_count == 3]) == 3,
        30,
        "the new shards to be led, waiting at the barrier",
    )
    assert started(database_url, held) == 1, only.log()
    assert not started(database_url, after), only.log()
    open_gate(database_url, held)
    wait_until(lambda: started(database_url, after), 60, "the key's next message")
    assert_one_call_per_key_at_a_time(database_url, positions)
    wait_until(
        lambda: (
            probe(database_url)
            .execute("SELECT draining_shard_count IS NULL FROM outbox.subscriptions")
            .fetchone()
            == (True,)
        ),
        60,
        "the change to end",
    )
    assert (started(database_url, held), started(database_url, after)) == (1, 1), only.log()
    assert WAITING not in only.log()
    assert_clean_exit(only, daemons)


def assert_clean_exit(daemon: Daemon, daemons: DaemonGroup) -> None:
    """Every call returned long ago: nothing is reported as still running, exit code 0."""
    code = daemon.terminate()
    assert "still running" not in daemon.log(), daemons.logs()
    assert code == 0, daemons.logs()
