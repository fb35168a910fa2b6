"""`outbox prune [--dry-run]` and the retention line of `outbox status`, run as an operator
would."""

import psycopg

import outbox
from outbox import NewMessage
from tests.support.cli import outbox_command, outbox_succeeds
from tests.support.daemons import wait_until
from tests.support.partitions import move_checkpoint, partition_names, use_small_partitions

NO_AGE = ("--retention-minimum-age", "0.001", "--partition-size", "100")


def _fill(url: str) -> None:
    use_small_partitions(url, 100)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO outbox.subscriptions (subscription_id, publication_id)"
            " VALUES ('billing', 'orders')"
        )
        with conn.transaction():
            outbox.append_many(conn, "orders", [NewMessage("T", {}) for _ in range(150)])


def _partitions(url: str) -> list[str]:
    with psycopg.connect(url) as conn:
        return partition_names(conn)


def test_prune_dry_run_then_prune(database_url: str) -> None:
    _fill(database_url)
    status = outbox_succeeds(database_url, "status", "--retention-stale-after", "3600")
    assert "messages_from_0 (positions 0 to 99) held by subscription billing since" in status
    assert "STALE" not in status
    assert "STALE" in outbox_succeeds(database_url, "status", "--retention-stale-after", "0.001")

    held = outbox_succeeds(database_url, "prune", "--dry-run", *NO_AGE)
    assert "nothing to retire" in held
    assert "held by subscription billing" in held

    with psycopg.connect(database_url, autocommit=True) as conn:
        move_checkpoint(conn, "billing", 150)
    before = _partitions(database_url)
    dry = outbox_succeeds(database_url, "prune", "--dry-run", *NO_AGE)
    assert "would retire messages_from_0: positions 0 to 99, 99 messages" in dry
    assert _partitions(database_url) == before

    # The default minimum age, a day, keeps it; partitions due ahead are created all the same.
    kept = outbox_succeeds(database_url, "prune", "--partition-size", "100")
    assert "nothing to retire" in kept
    assert "created partition messages_from_300" in kept
    assert _partitions(database_url) == [*before, "messages_from_300"]

    done = outbox_succeeds(database_url, "prune", *NO_AGE)
    assert "retired messages_from_0: positions 0 to 99, 99 messages" in done
    assert _partitions(database_url)[0] == "messages_from_100"


def test_prune_refuses_a_bad_value_in_one_line(database_url: str) -> None:
    done = outbox_command(["prune", "--partition-size", "0"], database_url)
    assert done.returncode == 2
    assert "partition_size must be > 0, got 0" in done.stderr
    assert "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_dry_run_says_what_holds_each_partition_and_a_quiet_one_closes_by_age(
    database_url: str,
) -> None:
    """Two messages in a partition of 1M positions: before, `prune --dry-run` said only
    "nothing to retire", and they stayed until a million more were written."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO outbox.subscriptions (subscription_id, publication_id)"
            " VALUES ('billing', 'orders')"
        )
        for n in range(2):
            outbox.append(conn, "orders", "T", {"n": n})
        move_checkpoint(conn, "billing", 2)
    one_second = ("--retention-minimum-age", "1")
    dry = outbox_succeeds(database_url, "prune", "--dry-run", *one_second)
    assert "nothing to retire" in dry
    assert (
        "messages_from_0 (positions 0 to 999999, 2 messages): filling (the next position is 3);"
        " it closes by age "
    ) in dry
    assert "messages_from_1000000 (positions 1000000 to 1999999, 0 messages): made ahead" in dry

    def due() -> str | None:
        dry = outbox_succeeds(database_url, "prune", "--dry-run", *one_second)
        return dry if "it closes by age at the next retention pass" in dry else None

    wait_until(due, 30, "the first message to be older than the minimum age")
    closed = outbox_succeeds(database_url, "prune", *one_second)
    assert "closed messages_from_0 by age" in closed
    assert _partitions(database_url)[0] == "messages_from_0"  # retired by the next pass
    done = outbox_succeeds(database_url, "prune", *one_second)
    assert "retired messages_from_0: positions 0 to 999999, 2 messages" in done
    assert _partitions(database_url) == ["messages_from_1000000", "messages_from_2000000"]
