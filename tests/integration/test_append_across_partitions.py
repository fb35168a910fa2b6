"""(publication, message_id) stays unique across partitions: no unique index can span them, so
append locks the pair before looking it up. Two appends of one id that straddle a partition
boundary are the case a per-partition index alone would let through."""

import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from psycopg import sql

import outbox
from outbox import NewMessage
from tests.support.partitions import use_small_partitions

SIZE = 100


def _waiting_for_advisory_lock(url: str) -> bool:
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
        ).fetchone()
    return bool(row and row[0])


def _rows_with_id(url: str, message_id: str) -> list[tuple[int, str]]:
    with psycopg.connect(url) as conn:
        return conn.execute(
            "SELECT position, tableoid::regclass::text FROM outbox.messages"
            " WHERE publication_id = 'orders' AND message_id = %s ORDER BY position",
            (message_id,),
        ).fetchall()


def _single(conn: psycopg.Connection[Any], message_id: str) -> int:
    return outbox.append(conn, "orders", "T", {}, message_id=message_id)


def _batch(conn: psycopg.Connection[Any], message_id: str) -> int:
    messages = [
        NewMessage("T", {}, message_id=f"{message_id}-other"),
        NewMessage("T", {}, message_id=message_id),
    ]
    return outbox.append_many(conn, "orders", messages)[1]


Append = Callable[[psycopg.Connection[Any], str], int]


# A single append locks inside outbox.append_message, a batch in a statement of its own: the
# mixed pairs prove the two take the same lock.
@pytest.mark.parametrize(
    ("append", "second"),
    [(_single, _single), (_batch, _batch), (_batch, _single), (_single, _batch)],
    ids=["append", "append_many", "append_many-then-append", "append-then-append_many"],
)
@pytest.mark.parametrize("first_commits", [True, False], ids=["commit", "rollback"])
def test_a_duplicate_in_the_next_partition_waits_for_the_first_and_then_agrees(
    database_url: str, append: Append, second: Append, first_commits: bool
) -> None:
    use_small_partitions(database_url, SIZE, ahead=3)
    with psycopg.connect(database_url) as conn:
        conn.execute(
            sql.SQL("ALTER TABLE outbox.messages ALTER COLUMN position RESTART WITH {}").format(
                sql.Literal(SIZE - 2)
            )
        )
        conn.commit()
    results: dict[str, int] = {}
    with psycopg.connect(database_url) as first:
        results["first"] = append(first, "order-42")
        assert results["first"] < SIZE  # the last positions of the first partition
        # More messages of the same transaction use up the first partition, so the second
        # append's row falls in the next one, whose own unique index knows nothing of the first.
        outbox.append_many(first, "orders", [NewMessage("T", {}) for _ in range(5)])

        def second_append() -> None:
            with psycopg.connect(database_url) as other:
                results["second"] = second(other, "order-42")

        thread = threading.Thread(target=second_append)
        thread.start()
        deadline = time.monotonic() + 10
        while not _waiting_for_advisory_lock(database_url):
            assert time.monotonic() < deadline, "the duplicate append did not wait"
            time.sleep(0.01)
        first.commit() if first_commits else first.rollback()
    thread.join(10)
    assert not thread.is_alive()
    rows = _rows_with_id(database_url, "order-42")
    assert len(rows) == 1
    if first_commits:
        assert results["second"] == results["first"]
    else:
        assert results["second"] >= SIZE
        assert rows[0][1] == "outbox.messages_from_100"


def test_a_repeated_id_finds_the_row_in_an_older_partition(database_url: str) -> None:
    use_small_partitions(database_url, SIZE, ahead=3)
    with psycopg.connect(database_url) as conn:
        first = _single(conn, "order-7")
        outbox.append_many(conn, "orders", [NewMessage("T", {}) for _ in range(2 * SIZE)])
        again = _single(conn, "order-7")
        batch = outbox.append_many(
            conn,
            "orders",
            [NewMessage("T", {}, message_id="order-7"), NewMessage("T", {}, message_id="new")],
        )
    assert again == first == batch[0]
    assert len(_rows_with_id(database_url, "order-7")) == 1


WRITERS = 3
ROUNDS = 40
BATCH = 5


def test_batches_of_the_same_ids_on_autocommit_connections_store_each_id_once(
    database_url: str,
) -> None:
    """On an autocommit connection every statement is a transaction: a lock taken by one
    statement is gone before the next one looks the ids up. Several writers append the same
    batch of ids at the same moment, round after round, over partitions of a batch's size."""
    use_small_partitions(database_url, BATCH, ahead=WRITERS * ROUNDS + 1)
    start = threading.Barrier(WRITERS)
    answers: list[list[list[int]]] = [[] for _ in range(WRITERS)]
    # Within one partition its unique index refuses a duplicate instead.
    refused: list[psycopg.errors.UniqueViolation] = []
    failures: list[BaseException] = []

    def writer(answered: list[list[int]]) -> None:
        try:
            with psycopg.connect(database_url, autocommit=True) as conn:
                for round_number in range(ROUNDS):
                    batch = [
                        NewMessage("T", {}, message_id=f"round-{round_number}-{n}")
                        for n in range(BATCH)
                    ]
                    start.wait(10)
                    try:
                        answered.append(outbox.append_many(conn, "orders", batch))
                    except psycopg.errors.UniqueViolation as error:
                        refused.append(error)
        except BaseException as error:
            failures.append(error)
            start.abort()

    threads = [threading.Thread(target=writer, args=(answers[n],)) for n in range(WRITERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not failures, failures
    with psycopg.connect(database_url) as conn:
        stored = conn.execute(
            "SELECT message_id, count(*) FROM outbox.messages GROUP BY message_id"
            " HAVING count(*) > 1 ORDER BY message_id"
        ).fetchall()
    assert stored == [], f"{len(stored)} ids stored more than once, {len(refused)} batches refused"
    assert refused == []
    # Every writer was answered with the one stored position of each id.
    assert answers[0] == answers[1] == answers[2]
