"""What the operator façade says an action will change, against what the action then does
(only while it would still change that); and what it says the connected role may do."""

import threading
from typing import Any

import psycopg
import pytest

import outbox
from outbox.positions import Position
from poller import operations
from tests.support.daemons import wait_until
from tests.support.role_logins import login_as

KEYS = 10


@pytest.fixture
def conn(database_url: str) -> Any:
    with psycopg.connect(database_url, autocommit=True) as connection:
        yield connection


def append(conn: psycopg.Connection[Any], count: int) -> list[Position]:
    places = []
    for n in range(count):
        with conn.transaction():
            position = outbox.append(conn, "orders", "T", {"n": n}, partition_key=f"k{n % KEYS}")
        row = conn.execute(
            "SELECT transaction_id::text::bigint FROM outbox.messages WHERE position = %s",
            [position],
        ).fetchone()
        assert row is not None
        places.append(Position(row[0], position))
    return places


def test_a_seek_preview_counts_every_shards_messages_it_delivers_again_or_passes_over(
    conn: psycopg.Connection[Any],
) -> None:
    operations.create(conn, "billing", "orders", "start", {}, shards=4)
    places = append(conn, 40)
    forward = operations.preview_seek(conn, "billing", to=str(places[-1]))
    assert (forward.delivered_again, forward.passed_over) == (0, 40)

    at, _ = operations.seek(conn, "billing", str(places[-1]))
    assert at == forward.to
    back = operations.preview_seek(conn, "billing", to=str(places[19]))
    assert (back.delivered_again, back.passed_over) == (20, 0)
    by_message = operations.preview_seek(conn, "billing", message_id=_message_id(conn, places[5]))
    assert by_message.delivered_again == 35, "resumes with the message: it is delivered again"
    # Each shard counts its own: the first message's shard back to the start, the others
    # where they are.
    shard = _shard_of(conn, places[0])
    conn.execute(
        "UPDATE outbox.subscription_shards SET last_processed_transaction_id = '0',"
        " last_processed_position = 0 WHERE subscription_id = 'billing' AND shard = %s",
        [shard],
    )
    in_shard = _in_shard(conn, shard, after=0)
    assert 0 < in_shard < 40
    split = operations.preview_seek(conn, "billing", to=str(places[19]))
    after = _in_shard(conn, shard, after=places[19].position)
    assert (split.delivered_again, split.passed_over) == (20 - after, in_shard - after)


def _shard_of(conn: psycopg.Connection[Any], at: Position) -> int:
    row = conn.execute(
        "SELECT outbox.message_shard(partition_key, position, 4) FROM outbox.messages"
        " WHERE position = %s",
        [at.position],
    ).fetchone()
    assert row is not None
    return int(row[0])


def _in_shard(conn: psycopg.Connection[Any], shard: int, after: int) -> int:
    row = conn.execute(
        "SELECT count(*) FROM outbox.messages WHERE position > %s"
        " AND outbox.message_shard(partition_key, position, 4) = %s",
        [after, shard],
    ).fetchone()
    assert row is not None
    return int(row[0])


def _message_id(conn: psycopg.Connection[Any], at: Position) -> str:
    row = conn.execute(
        "SELECT message_id FROM outbox.messages WHERE position = %s", [at.position]
    ).fetchone()
    assert row is not None
    return str(row[0])


def test_a_skip_preview_counts_what_is_finished_undelivered_and_refuses_a_passed_place(
    conn: psycopg.Connection[Any],
) -> None:
    operations.create(conn, "billing", "orders", "start", {})
    places = append(conn, 5)
    preview = operations.preview_skip(conn, "billing", str(places[2]))
    assert (preview.to, preview.finished_undelivered) == (places[2], 3)
    operations.seek(conn, "billing", str(places[3]))
    with pytest.raises(operations.SubscriptionError, match="already past it"):
        operations.preview_skip(conn, "billing", str(places[2]))
    with pytest.raises(operations.SubscriptionError, match="already past it"):
        operations.request_skip(conn, "billing", str(places[2]))


def test_a_parked_preview_counts_what_a_replay_or_purge_acts_on(
    conn: psycopg.Connection[Any],
) -> None:
    operations.create(conn, "billing", "orders", "start", {})
    places = append(conn, 3)
    for at in places[:2]:
        conn.execute(
            "INSERT INTO outbox.parked_messages"
            " (subscription_id, position, transaction_id, attempts, last_error)"
            " VALUES ('billing', %s, %s::text::xid8, 1, 'failed')",
            [at.position, str(at.transaction_id)],
        )
    assert operations.preview_parked(conn, "billing", None).messages == 2
    assert operations.preview_parked(conn, "billing", places[0]).messages == 1
    assert operations.purge_parked(conn, "billing", None) == 2
    assert operations.preview_parked(conn, "billing", None).messages == 0


@pytest.mark.parametrize(
    ("role", "reads_messages", "acts"),
    [("outbox_reader", False, False), ("outbox_poller", True, False)],
)
def test_what_a_role_may_do_is_read_from_its_privileges(
    database_url: str, conn: psycopg.Connection[Any], role: str, reads_messages: bool, acts: bool
) -> None:
    owner = operations.privileges(conn)
    assert (owner.reads_messages, owner.acts) == (True, True)
    with login_as(database_url, role) as url, psycopg.connect(url) as login:
        found = operations.privileges(login)
    assert (found.reads_messages, found.acts) == (reads_messages, acts)
    assert found.role.startswith("outbox_test_login_")


def test_a_purge_as_shown_that_meets_one_of_its_rows_going_purges_nothing(
    database_url: str, conn: psycopg.Connection[Any]
) -> None:
    """The purge waits for a row another transaction is unparking (a replay that delivered
    it), finds it gone once that commits, and purges none of the others: not what was shown."""
    operations.create(conn, "billing", "orders", "start", {})
    places = append(conn, 3)
    for at in places:
        conn.execute(
            "INSERT INTO outbox.parked_messages"
            " (subscription_id, position, transaction_id, attempts, last_error)"
            " VALUES ('billing', %s, %s::text::xid8, 1, 'failed')",
            [at.position, str(at.transaction_id)],
        )
    shown = operations.preview_parked(conn, "billing", None)
    assert (shown.messages, shown.up_to) == (3, places[-1])
    outcome: list[object] = []
    with psycopg.connect(database_url) as unparking, psycopg.connect(database_url) as purging:
        unparking.execute(
            "DELETE FROM outbox.parked_messages WHERE position = %s", [places[1].position]
        )
        pid = purging.info.backend_pid

        def purge() -> None:
            try:
                outcome.append(operations.purge_as_shown(purging, shown))
            except operations.ChangedSinceShownError as changed:
                outcome.append(changed.now)

        purger = threading.Thread(target=purge)
        purger.start()
        wait_until(lambda: _waits_for_a_lock(conn, pid), 10, "the purge to wait for the row")
        unparking.commit()
        purger.join(timeout=10)
    assert len(outcome) == 1
    now = outcome[0]
    assert isinstance(now, operations.ParkedPreview), now
    assert now.messages == 2
    row = conn.execute("SELECT count(*) FROM outbox.parked_messages").fetchone()
    assert row == (2,), "nothing was purged"


def _waits_for_a_lock(conn: psycopg.Connection[Any], pid: int) -> bool:
    row = conn.execute(
        "SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", [pid]
    ).fetchone()
    return row is not None and row[0] == "Lock"
