"""`outbox skip NAME --to TX:POS` against live daemons: the request reaches the leader, a
draining key is not released early (Pulsar #25627), what comes after the skip point is
delivered, and nothing at or before it is."""

import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

import outbox
from outbox.positions import Position
from poller.subscription import owner_of
from tests.support.cli import outbox_command, outbox_succeeds
from tests.support.daemons import (
    DaemonGroup,
    create_handled_table,
    daemon_group,
    handled_rows,
    wait_until,
)
from tests.support.databases import probe
from tests.support.gated_handler import create_gate_tables, gated_rows, open_gate
from tests.support.stored import create_subscription, epoch_of, stored_checkpoint

GATED_HANDLER = "tests.support.gated_handler:handle"
# Renewals (which carry the request to the leader) every 0.25 s.
DAEMON_OPTIONS = ("--lease-seconds", "1")


@pytest.fixture
def daemons(database_url: str, tmp_path: Path) -> Iterator[DaemonGroup]:
    create_handled_table(database_url)
    create_gate_tables(database_url)
    with daemon_group(database_url, tmp_path) as group:
        yield group


def append(url: str, key: str | None = None, *, hold: bool = False) -> Position:
    with psycopg.connect(url) as conn:
        position = outbox.append(conn, "orders", "OrderPlaced", {"hold": hold}, partition_key=key)
        row = conn.execute(
            "SELECT transaction_id::text::bigint FROM outbox.messages WHERE position = %s",
            (position,),
        ).fetchone()
    assert row is not None
    return Position(row[0], position)


def skip_request_pending(url: str, subscription: str) -> bool:
    query = "SELECT skip_epoch IS NOT NULL FROM outbox.subscriptions WHERE subscription_id = %s"
    row = probe(url).execute(query, (subscription,)).fetchone()
    return bool(row and row[0])


def draining_keys(url: str, subscription: str) -> list[str]:
    row = (
        probe(url)
        .execute(
            "SELECT draining_keys FROM outbox.subscription_status WHERE subscription_id = %s",
            (subscription,),
        )
        .fetchone()
    )
    return [] if row is None else list(row[0])


def test_skip_past_a_draining_key_waits_for_its_delivery_and_delivers_what_follows(
    database_url: str, daemons: DaemonGroup
) -> None:
    # `key` is owned by consumer 0 of one, and by consumer 1 of two: once the group grows
    # while its message is in flight, the key drains on consumer 0.
    key = next(f"k{n}" for n in range(1000) if owner_of(f"k{n}", 2) == 1)
    other = next(f"o{n}" for n in range(1000) if owner_of(f"o{n}", 2) == 0)
    create_subscription(database_url, "billing", "orders", strategy="pinned", max_in_flight=2)
    held = append(database_url, key, hold=True)
    daemon = daemons.start("billing", *DAEMON_OPTIONS, handler=GATED_HANDLER)
    wait_until(lambda: held.position in gated_rows(database_url), 30, "the held delivery")
    outbox_succeeds(database_url, "subscription", "update", "billing", "--consumers", "2")
    wait_until(lambda: draining_keys(database_url, "billing") == [key], 30, f"{key} draining")

    skipped = append(database_url, key)  # waits behind the held one: its key is busy
    after_same_key = append(database_url, key)
    after_other_key = append(database_url, other)
    epoch = epoch_of(database_url, "billing")
    output = outbox_succeeds(database_url, "skip", "billing", "--to", str(skipped))
    assert "applied at its next lease renewal" in output
    daemon.wait_for_log(rf"subscription billing: skip to {skipped}\b", 30)

    # After the skip point, another key is delivered at once; the skipped key's next message
    # is not, while the skipped delivery is still running on its old owner.
    wait_until(lambda: after_other_key.position in gated_rows(database_url), 30, "other key")
    time.sleep(1.5)  # several renewals and checkpoint writes: nothing may release the key
    assert after_same_key.position not in gated_rows(database_url)
    assert draining_keys(database_url, "billing") == [key]

    open_gate(database_url, held.position)
    wait_until(
        lambda: after_same_key.position in gated_rows(database_url), 30, "the key's next message"
    )
    rows = gated_rows(database_url)
    assert skipped.position not in rows, "a skipped message was delivered"
    (held_delivery,) = rows[held.position]
    (next_delivery,) = rows[after_same_key.position]
    assert held_delivery[1] is not None
    assert held_delivery[1] <= next_delivery[0], "the key ran on two consumers at once"

    wait_until(
        lambda: (
            not skip_request_pending(database_url, "billing")
            and stored_checkpoint(database_url, "billing") >= after_other_key
        ),
        30,
        "the skip settled and the checkpoint past the last message",
    )
    assert epoch_of(database_url, "billing") == epoch  # unlike a seek
    assert daemon.terminate() == 0, daemons.logs()
    assert not daemon.errors(), daemons.logs()


def test_a_skip_without_a_daemon_is_applied_by_the_next_leader_before_it_reads(
    database_url: str, daemons: DaemonGroup
) -> None:
    create_subscription(database_url, "billing", "orders")
    positions = [append(database_url) for _ in range(5)]
    output = outbox_succeeds(database_url, "skip", "billing", "--to", str(positions[2]))
    assert "when a daemon next leads it" in output
    covered = outbox_succeeds(database_url, "skip", "billing", "--to", str(positions[1]))
    assert f"a skip to {positions[2]} is already pending" in covered

    daemon = daemons.start("billing", *DAEMON_OPTIONS)
    wait_until(lambda: len(handled_rows(database_url)) >= 2, 30, "the messages after the skip")
    wait_until(
        lambda: not skip_request_pending(database_url, "billing"), 30, "the skip request settled"
    )
    assert sorted(row.at for row in handled_rows(database_url)) == positions[3:]
    assert stored_checkpoint(database_url, "billing") == positions[-1]
    assert daemon.terminate() == 0, daemons.logs()


@pytest.mark.parametrize(
    ("to", "named", "code"),
    # Malformed: a usage error (2); already passed or not reached yet: the database's (1).
    [("start", "'start'", 1), ("1:2:3", "'1:2:3'", 2), (f"{2**62}:1", f"'{2**62}:1'", 1)],
)
def test_a_skip_that_cannot_be_done_is_one_line_naming_the_value(
    database_url: str, to: str, named: str, code: int
) -> None:
    create_subscription(database_url, "billing", "orders")
    done = outbox_command(["skip", "billing", "--to", to], database_url)
    assert done.returncode == code, done.stdout
    assert named in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert not skip_request_pending(database_url, "billing")
    missing = outbox_command(["skip", "nobody", "--to", "end"], database_url)
    assert missing.returncode == 1
    assert "subscription 'nobody' does not exist" in missing.stderr


def test_a_skip_withdraws_the_prefetched_deliveries_its_handler_has_not_started(
    database_url: str, daemons: DaemonGroup
) -> None:
    # One consumer, one slot: the 40 messages go to it as one run, and the first one holds
    # the run while the skip comes; 2..30 sit in the run unstarted.
    create_subscription(database_url, "billing", "orders")
    held = append(database_url, hold=True)
    positions = [held, *(append(database_url) for _ in range(39))]
    daemon = daemons.start("billing", *DAEMON_OPTIONS, handler=GATED_HANDLER)
    wait_until(lambda: held.position in gated_rows(database_url), 30, "the held delivery")
    outbox_succeeds(database_url, "skip", "billing", "--to", str(positions[29]))
    daemon.wait_for_log(rf"subscription billing: skip to {positions[29]}\b", 30)

    open_gate(database_url, held.position)
    wait_until(
        lambda: (
            not skip_request_pending(database_url, "billing")
            and stored_checkpoint(database_url, "billing") == positions[-1]
        ),
        30,
        "the skip settled and the checkpoint past the last message",
    )
    delivered = sorted(gated_rows(database_url))
    assert delivered == [p.position for p in [held, *positions[30:]]], (
        "skipped messages were delivered"
    )
    assert daemon.terminate() == 0, daemons.logs()
    assert not daemon.errors(), daemons.logs()
