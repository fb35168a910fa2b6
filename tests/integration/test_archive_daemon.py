"""The daemon reads a subscription's archived history first: created `--from start` below the
retired-up-to mark, it delivers the archive's messages, then the table's, each once, each
key's in order, and resumes from checkpoints stored on either side of the seam."""

import time
from collections import defaultdict
from pathlib import Path

import psycopg
import pytest

import outbox
from outbox.positions import Position
from poller import operations
from poller.daemon.options import DaemonOptions
from poller.message import Message
from poller.retention import retention_pass
from poller.store.message_reads import read_batch
from tests.integration.test_daemon import EAGER_CHECKPOINTS, Recorder, stored_checkpoint, wait_for
from tests.support.archives import archive_ranges
from tests.support.inprocess import running_daemon
from tests.support.partitions import use_small_partitions

SIZE = 100
NO_AGE = DaemonOptions(retention_minimum_age=0.001, partition_size=SIZE, partitions_ahead=2)
KEYS = 7


def append(url: str, transactions: int, each: int) -> None:
    with psycopg.connect(url) as conn:
        for _ in range(transactions):
            outbox.append_many(
                conn,
                "orders",
                [
                    outbox.NewMessage("T", {"n": n}, partition_key=f"k{n % KEYS}")
                    for n in range(each)
                ],
            )
            conn.commit()


@pytest.fixture
def archived_history(database_url: str, tmp_path: Path) -> list[Message]:
    """250 messages archived (ranges of 60, files of 25) and retired from the table but the
    last partition's, then 100 more in the table only: the whole history, in delivery order."""
    use_small_partitions(database_url, SIZE)
    append(database_url, 10, 25)
    archive_ranges(database_url, "orders", tmp_path.as_uri(), rows_per_range=60, rows_per_file=25)
    with psycopg.connect(database_url, autocommit=True) as conn:
        history = read_batch(conn, "orders", Position(0, 0), 10_000)
        retired = [r.outcome for r in retention_pass(conn, NO_AGE).retired]
        assert retired.count("retired") >= 2
    append(database_url, 4, 25)
    with psycopg.connect(database_url, autocommit=True) as conn:
        later = read_batch(conn, "orders", history[-1].at, 10_000)
        assert conn.execute("SELECT min(position) FROM outbox.messages").fetchone() == (200,)
        for name, shards in (("late", 1), ("late-sharded", 3)):
            settings = EAGER_CHECKPOINTS | {"consumers": 3, "strategy": "pinned"}
            assert operations.create(conn, name, "orders", "start", settings, shards=shards) == (
                0,
                0,
            )
    return history + later


def in_key_order(delivered: list[Message], history: list[Message]) -> bool:
    """Each key's messages in delivery order (a message delivered again after a restart may
    repeat, never go back before one after it)."""
    place = {message.position: index for index, message in enumerate(history)}
    by_key: dict[str | None, list[int]] = defaultdict(list)
    for message in delivered:
        by_key[message.partition_key].append(place[message.position])
    return all(indexes == sorted(indexes) for indexes in by_key.values())


def test_a_subscription_from_the_start_reads_the_archive_then_the_table_across_restarts(
    database_url: str, archived_history: list[Message]
) -> None:
    seam = archived_history[249].at  # the archive's last message; the table's follow
    # Stopped in the archive, then past the seam, then at the end: each run resumes from the
    # checkpoint the one before stored.
    runs: list[list[Message]] = []
    stops = [Position(0, 0)]
    for goal in (archived_history[80].at, archived_history[265].at, archived_history[-1].at):
        # Each call takes a few milliseconds, as a handler's work does: a stop lands mid-way.
        recorder = Recorder(lambda _: time.sleep(0.01))
        with running_daemon(database_url, ["late"], recorder):

            def reached(goal: Position = goal) -> bool:
                return stored_checkpoint(database_url, "late") >= goal

            wait_for(reached, 60)
        runs.append(recorder.messages)
        stops.append(stored_checkpoint(database_url, "late"))
    assert stops[1] < seam < stops[2]
    for run, resumed_after in zip(runs, stops, strict=False):
        assert in_key_order(run, archived_history)
        assert all(m.at > resumed_after for m in run)  # nothing before the stored checkpoint
    delivered = {m.position for run in runs for m in run}
    assert delivered == {m.position for m in archived_history}

    sharded = Recorder()
    with running_daemon(database_url, ["late-sharded"], sharded):
        wait_for(lambda: len(sharded.messages) >= len(archived_history), timeout=60)
    assert sorted(m.position for m in sharded.messages) == sorted(
        m.position for m in archived_history
    )
    assert in_key_order(sharded.messages, archived_history)
    fields = ("transaction_id", "message_id", "partition_key", "data_text", "appended_at")
    by_position = {m.position: m for m in sharded.messages}
    for message in archived_history:
        assert [getattr(by_position[message.position], f) for f in fields] == [
            getattr(message, f) for f in fields
        ]
