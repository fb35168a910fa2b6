"""`outbox rebase` on a database whose stored ids run ahead of its cluster, as after a restore.

The restore is imitated by storing ids from the cluster's future: rows inserted with an
explicit transaction id carry the inserting transaction's xmin, as restored rows carry the
restore's. tests/integration/test_restore.py does the real thing with pg_dump.
"""

import threading
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from psycopg import sql
from sqlalchemy import NullPool, create_engine

import outbox
from outbox.positions import Position
from poller import operations
from poller.message import Message
from poller.store.rebase_store import RebaseRefusedError, rebase
from poller.store.restore_check import RestoredDatabaseError, ensure_not_restored
from tests.support.daemons import wait_until
from tests.support.inprocess import running_daemon

# An old cluster's ids, in the order its transactions wrote rows (positions ascend). Its
# delivery order is by (id, position), which differs from the order of positions.
OLD_IDS = [50, 20, 90, 20, 70, 30, 90, 60]
AHEAD = 1_000_000_000
# Few enough ids for a test to use up (the other transactions of the cluster use some too).
PASSABLE = 20_000


def _messages(conn: psycopg.Connection[Any]) -> list[tuple[int, int]]:
    rows = conn.execute(
        "SELECT transaction_id::text::bigint, position FROM outbox.messages"
        " ORDER BY transaction_id, position"
    ).fetchall()
    return [(row[0], row[1]) for row in rows]


def test_rebase_resumes_delivery_with_nothing_lost_or_repeated(database_url: str) -> None:
    old_order, _ = _restored_outbox(database_url)
    with psycopg.connect(database_url, autocommit=True) as conn:
        # One transaction each: three ids written here.
        written_here = [outbox.append(conn, "orders", "T", {"n": n}) for n in range(3)]
        with pytest.raises(RestoredDatabaseError, match="outbox rebase"):
            ensure_not_restored(conn, "sub")
    with psycopg.connect(database_url, autocommit=True) as conn:
        result = rebase(conn)
        assert result is not None
        assert (result.restored_ids, result.written_here_ids) == (
            len(set(OLD_IDS)),
            len(written_here),
        )
        ensure_not_restored(conn, "sub")
        after = _messages(conn)
        record = operations.get(conn, "sub")
        parked = conn.execute(
            "SELECT p.transaction_id = m.transaction_id FROM outbox.parked_messages AS p"
            " JOIN outbox.messages AS m USING (position)"
        ).fetchall()
        assert rebase(conn) is None  # done once: nothing is ahead any more
    # Delivery order kept: old messages in their order, then those written here.
    assert [position for _, position in after] == old_order + written_here
    assert Position(*after[2]) == record.checkpoint
    assert record.epoch == 1
    assert parked == [(True,)]

    delivered: list[int] = []
    lock = threading.Lock()

    def record_delivery(message: Message) -> None:
        with lock:
            delivered.append(message.position)

    with running_daemon(database_url, ["sub"], record_delivery):
        wait_until(lambda: len(delivered) >= len(old_order), 15, "every message")
        with psycopg.connect(database_url) as conn:
            later = outbox.append(conn, "orders", "T", {"n": "after the rebase"})
        wait_until(lambda: later in delivered, 15, "the message appended after the rebase")
    assert delivered == old_order[3:] + written_here + [later]


def _in_psycopg_savepoint(url: str, message_id: str) -> int:
    with psycopg.connect(url) as conn, conn.transaction(), conn.transaction():
        return outbox.append(conn, "orders", "T", {}, message_id=message_id)


def _in_sqlalchemy_nested_transaction(url: str, message_id: str) -> int:
    engine = create_engine(
        "postgresql+psycopg://", creator=lambda: psycopg.connect(url), poolclass=NullPool
    )
    try:
        with engine.begin() as conn, conn.begin_nested():
            return outbox.append(conn, "orders", "T", {}, message_id=message_id)
    finally:
        engine.dispose()


def _in_plpgsql_exception_block(url: str, message_id: str) -> int:
    # A block with an EXCEPTION clause runs in a subtransaction of its own.
    with psycopg.connect(url) as conn:
        conn.execute(
            "CREATE TEMPORARY TABLE appended (position bigint) ON COMMIT DROP;"
            " DO $block$ BEGIN"
            "   INSERT INTO appended SELECT outbox.append_message("
            f"    'orders', '{message_id}', 'T', NULL, '{{}}', '{{}}');"
            " EXCEPTION WHEN unique_violation THEN RAISE; END $block$"
        )
        row = conn.execute("SELECT position FROM appended").fetchone()
        assert row is not None
        return int(row[0])


@pytest.mark.parametrize(
    "append_in_subtransaction",
    [_in_psycopg_savepoint, _in_sqlalchemy_nested_transaction, _in_plpgsql_exception_block],
    ids=["psycopg-nested-transaction", "sqlalchemy-begin-nested", "plpgsql-exception-block"],
)
def test_messages_written_here_in_a_subtransaction_follow_the_restored_ones(
    database_url: str, append_in_subtransaction: Callable[[str, str], int]
) -> None:
    """A row written in a subtransaction carries the subtransaction's id in xmin, not its
    transaction's: it must still count as written here, after every restored message."""
    old_order, _ = _restored_outbox(database_url)
    written_here = [append_in_subtransaction(database_url, f"local-{n}") for n in range(3)]
    with psycopg.connect(database_url, autocommit=True) as conn:
        result = rebase(conn)
        assert result is not None
        assert (result.restored_ids, result.written_here_ids) == (len(set(OLD_IDS)), 3)
        after = _messages(conn)
        record = operations.get(conn, "sub")
    assert [position for _, position in after] == old_order + written_here
    # Behind the checkpoint they would never be delivered.
    assert all(Position(*row) > record.checkpoint for row in after[-3:])
    assert Position(*after[2]) == record.checkpoint


def test_messages_written_before_the_counter_passed_the_restored_ids_are_refused(
    database_url: str,
) -> None:
    """Written while the restored ids were ahead, they sort among the restored messages, some
    behind the checkpoint; once the counter has passed them, a daemon would deliver again,
    so the rebase cannot know what was delivered in the mixed order: it refuses, naming them."""
    _restored_outbox(database_url, ahead=PASSABLE)
    with psycopg.connect(database_url, autocommit=True) as conn:
        written_here = [outbox.append(conn, "orders", "T", {"n": n}) for n in range(3)]
        conn.execute(
            sql.SQL(
                "DO $$ BEGIN FOR i IN 1..{} LOOP PERFORM pg_current_xact_id(); COMMIT;"
                " END LOOP; END $$"
            ).format(sql.Literal(PASSABLE + max(OLD_IDS)))
        )
        ensure_not_restored(conn, "sub")  # nothing ahead any more: a daemon would run
        before = _messages(conn)
        with pytest.raises(RebaseRefusedError) as refused:
            rebase(conn)
        assert _messages(conn) == before
        assert operations.get(conn, "sub").epoch == 0
    assert str(refused.value).startswith(
        f"3 messages written in this cluster since the restore (positions {written_here[0]} to"
        f" {written_here[-1]}) have transaction ids below restored ones"
    )
    assert str(refused.value).endswith(
        "Behind a checkpoint, so not delivered unless it is seeked back:"
        f" 'sub' 3 (positions {written_here[0]} to {written_here[-1]})"
    )


def _restored_outbox(url: str, ahead: int = AHEAD) -> tuple[list[int], Position]:
    """Old messages `ahead` of the cluster, a checkpoint after the first three in delivery
    order (stored directly: `seek` refuses an id from the future) and the third of them
    parked; returns the positions in old delivery order and the checkpoint."""
    with psycopg.connect(url) as conn:
        future = conn.execute(
            "SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint + %s", [ahead]
        ).fetchone()
        assert future is not None
        for n, old in enumerate(OLD_IDS):
            conn.execute(
                "INSERT INTO outbox.messages"
                " (publication_id, message_id, message_type, data, transaction_id)"
                " VALUES ('orders', %s, 'T', '{}', %s::text::xid8)",
                [f"old-{n}", future[0] + old],
            )
        delivered = _messages(conn)
        checkpoint = Position(*delivered[2])
        conn.execute(
            "INSERT INTO outbox.subscriptions"
            " (subscription_id, publication_id, last_processed_transaction_id,"
            "  last_processed_position)"
            " VALUES ('sub', 'orders', %s::text::xid8, %s)",
            [checkpoint.transaction_id, checkpoint.position],
        )
        conn.execute(
            "INSERT INTO outbox.parked_messages"
            " (subscription_id, position, transaction_id, attempts, last_error)"
            " VALUES ('sub', %s, %s::text::xid8, 3, 'old failure')",
            [checkpoint.position, checkpoint.transaction_id],
        )
    return [position for _, position in delivered], checkpoint


def test_rebase_is_refused_while_a_daemon_leads_and_changes_nothing(database_url: str) -> None:
    with psycopg.connect(database_url) as conn:
        operations.create(conn, "sub", "orders", "start", {})
        outbox.append(conn, "orders", "T", {})
        before = _messages(conn)
    seen: list[int] = []
    with running_daemon(database_url, ["sub"], lambda message: seen.append(message.position)):
        wait_until(lambda: seen, 15, "the daemon to lead and deliver")
        with (
            psycopg.connect(database_url, autocommit=True) as conn,
            pytest.raises(RebaseRefusedError, match="a daemon leads 'sub'"),
        ):
            rebase(conn)
    with psycopg.connect(database_url) as conn:
        assert _messages(conn) == before
        assert operations.get(conn, "sub").epoch == 0


def test_rebase_of_a_database_never_restored_changes_nothing(database_url: str) -> None:
    with psycopg.connect(database_url) as conn:
        operations.create(conn, "sub", "orders", "start", {})
        for n in range(3):
            outbox.append(conn, "orders", "T", {"n": n})
            conn.commit()
        before = _messages(conn)
    with psycopg.connect(database_url, autocommit=True) as conn:
        assert rebase(conn) is None
        assert _messages(conn) == before
        assert operations.get(conn, "sub").epoch == 0


def _sharded_subscription(
    conn: psycopg.Connection[Any],
    name: str,
    shard_count: int,
    rows: dict[tuple[int, int], Position],
    draining: tuple[int, Position] | None = None,
    publication: str = "orders",
) -> None:
    """A sharded subscription stored directly, as a dump restores it (`subscription create`
    and `seek` refuse ids from the future): its shard rows by (count, shard), the floor at
    0:0, and a change of the count draining `draining[0]` shards up to `draining[1]`."""
    barrier = None if draining is None else draining[1]
    conn.execute(
        "INSERT INTO outbox.subscriptions (subscription_id, publication_id,"
        " last_processed_transaction_id, last_processed_position, shard_count,"
        " draining_shard_count, shard_barrier_transaction_id, shard_barrier_position)"
        " VALUES (%s, %s, '0', 0, %s, %s, %s::text::xid8, %s)",
        [
            name,
            publication,
            shard_count,
            None if draining is None else draining[0],
            None if barrier is None else str(barrier.transaction_id),
            None if barrier is None else barrier.position,
        ],
    )
    for (count, shard), at in rows.items():
        conn.execute(
            "INSERT INTO outbox.subscription_shards (subscription_id, shard_count, shard,"
            " last_processed_transaction_id, last_processed_position)"
            " VALUES (%s, %s, %s, %s::text::xid8, %s)",
            [name, count, shard, str(at.transaction_id), at.position],
        )


def test_rebase_rewrites_shard_checkpoints_and_barriers_with_their_messages(
    database_url: str,
) -> None:
    """Each shard checkpoint and the barrier of a change keep pointing at the same message, and
    a shard checkpoint alone from the future (a publication without messages) is noticed."""
    _restored_outbox(database_url)
    with psycopg.connect(database_url) as conn:
        order = [Position(*row) for row in _messages(conn)]
        _sharded_subscription(
            conn,
            "sharded",
            2,
            {(1, 0): order[0], (2, 0): order[5], (2, 1): order[5]},
            draining=(1, order[5]),
        )
        _sharded_subscription(
            conn,
            "elsewhere",
            2,
            {(2, 0): Position(0, 0), (2, 1): order[7]},
            publication="payments",  # no messages: only its shard row holds a future id
        )
    with psycopg.connect(database_url, autocommit=True) as conn:
        for name in ("sharded", "elsewhere"):
            with pytest.raises(RestoredDatabaseError, match=repr(name)):
                ensure_not_restored(conn, name)
        assert rebase(conn) is not None
        for name in ("sharded", "elsewhere"):
            ensure_not_restored(conn, name)
        moved = conn.execute(
            "SELECT sh.subscription_id, sh.shard_count, sh.shard,"
            "       sh.last_processed_transaction_id = m.transaction_id"
            " FROM outbox.subscription_shards AS sh"
            " JOIN outbox.messages AS m ON m.position = sh.last_processed_position"
            " ORDER BY 1, 2, 3"
        ).fetchall()
        barrier = conn.execute(
            "SELECT s.shard_barrier_transaction_id = m.transaction_id, s.epoch"
            " FROM outbox.subscriptions AS s"
            " JOIN outbox.messages AS m ON m.position = s.shard_barrier_position"
        ).fetchall()
        after = [Position(*row) for row in _messages(conn)]
    assert [at.position for at in after] == [at.position for at in order]
    assert moved == [
        ("elsewhere", 2, 1, True),
        ("sharded", 1, 0, True),
        ("sharded", 2, 0, True),
        ("sharded", 2, 1, True),
    ]
    assert barrier == [(True, 1)]


def test_rebase_is_refused_while_a_daemon_leads_a_shard_and_names_it(database_url: str) -> None:
    with psycopg.connect(database_url, autocommit=True, application_name="shard-holder") as conn:
        operations.create(conn, "sub", "orders", "start", {}, shards=2)
        conn.execute(
            "INSERT INTO outbox.subscription_leaders"
            " (subscription_id, shard_count, shard, token, holder, host, pid, since, expires_at)"
            " VALUES ('sub', 2, 1, 1, 'shard-holder', 'worker', 7, now(),"
            "         clock_timestamp() + interval '1 hour')"
        )
        with pytest.raises(RebaseRefusedError, match=r"a daemon leads 'sub' shard 1/2 \(pid 7"):
            rebase(conn)


def test_messages_behind_a_shards_checkpoint_are_named_when_the_rebase_is_refused(
    database_url: str,
) -> None:
    """A sharded subscription's floor can be far behind its shards: a misplaced message at or
    behind its own shard's checkpoint is never delivered either. The new shards of a change
    wait at the barrier, so what sorts before it is the old shards' to deliver, not passed."""
    _restored_outbox(database_url, ahead=PASSABLE)
    with psycopg.connect(database_url, autocommit=True) as conn:
        highest = max(Position(*row) for row in _messages(conn))
        written_here = [outbox.append(conn, "orders", "T", {"n": n}) for n in range(3)]
        start = Position(0, 0)
        _sharded_subscription(conn, "passed", 2, {(2, 0): highest, (2, 1): highest})
        _sharded_subscription(
            conn,
            "waiting",
            3,
            {(2, 0): start, (2, 1): start, (3, 0): highest, (3, 1): highest, (3, 2): highest},
            draining=(2, highest),
        )
        conn.execute(
            sql.SQL(
                "DO $$ BEGIN FOR i IN 1..{} LOOP PERFORM pg_current_xact_id(); COMMIT;"
                " END LOOP; END $$"
            ).format(sql.Literal(PASSABLE + max(OLD_IDS)))
        )
        with pytest.raises(RebaseRefusedError) as refused:
            rebase(conn)
    named = f"3 (positions {written_here[0]} to {written_here[-1]})"
    assert str(refused.value).endswith(
        f"Behind a checkpoint, so not delivered unless it is seeked back: 'passed' {named},"
        f" 'sub' {named}"
    )


def test_rebase_is_refused_while_a_publication_is_archived_and_changes_nothing(
    database_url: str,
) -> None:
    """The archive's files hold the old cluster's ids: renumbering its ranges alone would
    leave them matching no row of their files."""
    _restored_outbox(database_url)
    with psycopg.connect(database_url) as conn:
        conn.execute(
            "INSERT INTO outbox.archives (publication_id, uri, format_version,"
            " begins_after_transaction_id, begins_after_position, archived_transaction_id,"
            " archived_position) VALUES ('orders', 'file:///lake', 1, '0', 0, '0', 0)"
        )
        before = _messages(conn)
    with (
        psycopg.connect(database_url, autocommit=True) as conn,
        pytest.raises(RebaseRefusedError, match="'orders' archived to the lake"),
    ):
        rebase(conn)
    with psycopg.connect(database_url) as conn:
        assert _messages(conn) == before
