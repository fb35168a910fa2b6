"""A consumer's position stored in its own transaction: commits and rolls back with the
consumer's output, in outbox.consumer_positions or in a table the consumer names, and only
from the position the consumer started from (compare-and-set)."""

import threading
from typing import Any

import psycopg
import pytest

import poller
from poller.catch_up.consumer_positions import OutsideTransactionError


def connect(url: str) -> psycopg.Connection[Any]:
    return psycopg.connect(url, autocommit=True)


def test_a_stored_checkpoint_loads_back_and_moves_forward(database_url: str) -> None:
    with connect(database_url) as conn:
        assert poller.load_checkpoint(conn, "counts") is None
        with conn.transaction():
            poller.store_checkpoint(conn, "counts", poller.Checkpoint(10, 3), previous=None)
        with conn.transaction():
            poller.store_checkpoint(
                conn, "counts", poller.Checkpoint(11, 2), previous=poller.Checkpoint(10, 3)
            )
        assert poller.load_checkpoint(conn, "counts") == poller.Checkpoint(11, 2)
        assert poller.load_checkpoint(conn, "other") is None


def test_the_position_rolls_back_with_the_output(database_url: str) -> None:
    with connect(database_url) as conn:
        conn.execute("CREATE TABLE output (n int)")
        with conn.transaction():
            poller.store_checkpoint(conn, "counts", poller.Checkpoint(10, 3), previous=None)

        def fail_after_writing_both() -> None:
            with conn.transaction():
                conn.execute("INSERT INTO output VALUES (1)")
                poller.store_checkpoint(
                    conn, "counts", poller.Checkpoint(12, 1), previous=poller.Checkpoint(10, 3)
                )
                raise ZeroDivisionError  # the consumer failed after writing both

        with pytest.raises(ZeroDivisionError):
            fail_after_writing_both()
        assert conn.execute("SELECT count(*) FROM output").fetchone() == (0,)
        assert poller.load_checkpoint(conn, "counts") == poller.Checkpoint(10, 3)


@pytest.mark.parametrize("table", ["My Positions", ("projection", "positions")])
def test_a_table_the_consumer_names(database_url: str, table: str | tuple[str, str]) -> None:
    with connect(database_url) as conn:
        conn.execute("CREATE SCHEMA projection")
        name = psycopg.sql.Identifier(*((table,) if isinstance(table, str) else table))
        conn.execute(
            psycopg.sql.SQL(
                "CREATE TABLE {} (LIKE outbox.consumer_positions INCLUDING ALL)"
            ).format(name)
        )
        with conn.transaction():
            poller.store_checkpoint(
                conn, "counts", poller.Checkpoint(5, 6), previous=None, table=table
            )
        with conn.transaction(), pytest.raises(poller.ConsumerPositionConflictError):
            poller.store_checkpoint(
                conn, "counts", poller.Checkpoint(7, 7), previous=None, table=table
            )
        assert poller.load_checkpoint(conn, "counts", table=table) == poller.Checkpoint(5, 6)
        assert poller.load_checkpoint(conn, "counts") is None  # not in the default table


async def test_the_async_helpers(database_url: str) -> None:
    conn = await psycopg.AsyncConnection.connect(database_url, autocommit=True)
    async with conn:
        async with conn.transaction():
            await poller.store_checkpoint_async(
                conn, "counts", poller.Checkpoint(7, 8), previous=None
            )
        assert await poller.load_checkpoint_async(conn, "counts") == poller.Checkpoint(7, 8)
        with pytest.raises(poller.ConsumerPositionConflictError, match="stored 7:8, not 1:1"):
            async with conn.transaction():
                await poller.store_checkpoint_async(
                    conn, "counts", poller.Checkpoint(9, 9), previous=poller.Checkpoint(1, 1)
                )
        with pytest.raises(OutsideTransactionError):
            await poller.store_checkpoint_async(
                conn, "counts", poller.Checkpoint(9, 9), previous=poller.Checkpoint(7, 8)
            )


def test_storing_outside_a_transaction_is_refused(database_url: str) -> None:
    with connect(database_url) as conn:
        with pytest.raises(OutsideTransactionError, match=r"inside `with conn\.transaction"):
            poller.store_checkpoint(conn, "counts", poller.Checkpoint(1, 1), previous=None)
        assert poller.load_checkpoint(conn, "counts") is None


def test_a_position_that_does_not_move_forward_from_the_start_is_refused(
    database_url: str,
) -> None:
    start = poller.Checkpoint(10, 3)
    with connect(database_url) as conn:
        with conn.transaction():
            poller.store_checkpoint(conn, "counts", start, previous=None)
        for stale in (poller.Checkpoint(10, 3), poller.Checkpoint(9, 100)):
            with pytest.raises(ValueError, match="does not move forward"), conn.transaction():
                poller.store_checkpoint(conn, "counts", stale, previous=start)
        assert poller.load_checkpoint(conn, "counts") == poller.Checkpoint(10, 3)


def test_two_consumers_from_the_same_position_storing_ahead_commit_once(database_url: str) -> None:
    """Both start from the stored position; the first stores a position ahead and commits; the
    second, which projected the same messages and more, stores a position further ahead: it
    must be refused (comparing with its start), not accepted because it moves forward."""
    with connect(database_url) as first, connect(database_url) as second:
        first.execute("CREATE TABLE output (consumer text)")
        with first.transaction():
            poller.store_checkpoint(first, "counts", poller.Checkpoint(1, 1), previous=None)
        first_start = poller.load_checkpoint(first, "counts")
        second_start = poller.load_checkpoint(second, "counts")
        assert first_start == second_start == poller.Checkpoint(1, 1)
        with first.transaction():
            first.execute("INSERT INTO output VALUES ('first')")
            poller.store_checkpoint(first, "counts", poller.Checkpoint(5, 5), previous=first_start)

        def second_projects_further() -> None:
            with second.transaction():
                second.execute("INSERT INTO output VALUES ('second')")
                poller.store_checkpoint(
                    second, "counts", poller.Checkpoint(9, 9), previous=second_start
                )

        with pytest.raises(poller.ConsumerPositionConflictError, match="stored 5:5, not 1:1"):
            second_projects_further()
        assert first.execute("SELECT consumer FROM output").fetchall() == [("first",)]
        assert poller.load_checkpoint(first, "counts") == poller.Checkpoint(5, 5)


def test_two_consumers_storing_a_first_position_commit_once(database_url: str) -> None:
    """Neither had a stored position: the second's first store is refused."""
    with connect(database_url) as first, connect(database_url) as second:
        with first.transaction():
            poller.store_checkpoint(first, "counts", poller.Checkpoint(3, 3), previous=None)
        with (
            pytest.raises(poller.ConsumerPositionConflictError, match="stored 3:3, not none"),
            second.transaction(),
        ):
            poller.store_checkpoint(second, "counts", poller.Checkpoint(4, 4), previous=None)
        assert poller.load_checkpoint(first, "counts") == poller.Checkpoint(3, 3)


def test_two_processes_storing_the_same_checkpoint_commit_once(database_url: str) -> None:
    """The second waits on the first's row lock, then finds the position moved: only one of
    two consumers that projected the same messages commits its output."""
    with connect(database_url) as first, connect(database_url) as second:
        first.execute("CREATE TABLE output (consumer text)")
        outcome: list[BaseException | None] = []
        with first.transaction():
            poller.store_checkpoint(first, "counts", poller.Checkpoint(1, 1), previous=None)
        start = poller.Checkpoint(1, 1)
        with first.transaction():
            first.execute("INSERT INTO output VALUES ('first')")
            poller.store_checkpoint(first, "counts", poller.Checkpoint(2, 2), previous=start)

            def race() -> None:
                try:
                    with second.transaction():
                        second.execute("INSERT INTO output VALUES ('second')")
                        poller.store_checkpoint(
                            second, "counts", poller.Checkpoint(2, 2), previous=start
                        )
                    outcome.append(None)
                except poller.ConsumerPositionConflictError as error:
                    outcome.append(error)

            racer = threading.Thread(target=race)
            racer.start()
            racer.join(0.3)
            assert racer.is_alive()  # waiting on the first's uncommitted row
        racer.join(10)
        assert isinstance(outcome[0], poller.ConsumerPositionConflictError)
        assert first.execute("SELECT consumer FROM output").fetchall() == [("first",)]
