"""A consumer's position stored in its own transaction: commits and rolls back with the
consumer's output, in outbox.consumer_positions or in a table the consumer names."""

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
            poller.store_checkpoint(conn, "counts", poller.Checkpoint(10, 3))
        with conn.transaction():
            poller.store_checkpoint(conn, "counts", poller.Checkpoint(11, 2))
        assert poller.load_checkpoint(conn, "counts") == poller.Checkpoint(11, 2)
        assert poller.load_checkpoint(conn, "other") is None


def test_the_position_rolls_back_with_the_output(database_url: str) -> None:
    with connect(database_url) as conn:
        conn.execute("CREATE TABLE output (n int)")
        with conn.transaction():
            poller.store_checkpoint(conn, "counts", poller.Checkpoint(10, 3))

        def fail_after_writing_both() -> None:
            with conn.transaction():
                conn.execute("INSERT INTO output VALUES (1)")
                poller.store_checkpoint(conn, "counts", poller.Checkpoint(12, 1))
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
            poller.store_checkpoint(conn, "counts", poller.Checkpoint(5, 6), table=table)
        assert poller.load_checkpoint(conn, "counts", table=table) == poller.Checkpoint(5, 6)
        assert poller.load_checkpoint(conn, "counts") is None  # not in the default table


async def test_the_async_helpers(database_url: str) -> None:
    conn = await psycopg.AsyncConnection.connect(database_url, autocommit=True)
    async with conn:
        async with conn.transaction():
            await poller.store_checkpoint_async(conn, "counts", poller.Checkpoint(7, 8))
        assert await poller.load_checkpoint_async(conn, "counts") == poller.Checkpoint(7, 8)
        with pytest.raises(OutsideTransactionError):
            await poller.store_checkpoint_async(conn, "counts", poller.Checkpoint(9, 9))


def test_storing_outside_a_transaction_is_refused(database_url: str) -> None:
    with connect(database_url) as conn:
        with pytest.raises(OutsideTransactionError, match=r"inside `with conn\.transaction"):
            poller.store_checkpoint(conn, "counts", poller.Checkpoint(1, 1))
        assert poller.load_checkpoint(conn, "counts") is None


def test_a_position_that_does_not_move_forward_is_a_conflict(database_url: str) -> None:
    with connect(database_url) as conn:
        with conn.transaction():
            poller.store_checkpoint(conn, "counts", poller.Checkpoint(10, 3))
        for stale in (poller.Checkpoint(10, 3), poller.Checkpoint(9, 100)):
            with pytest.raises(poller.ConsumerPositionConflictError), conn.transaction():
                poller.store_checkpoint(conn, "counts", stale)
        assert poller.load_checkpoint(conn, "counts") == poller.Checkpoint(10, 3)


def test_two_processes_storing_the_same_checkpoint_commit_once(database_url: str) -> None:
    """The second waits on the first's row lock, then finds the position moved: only one of
    two consumers that projected the same messages commits its output."""
    with connect(database_url) as first, connect(database_url) as second:
        first.execute("CREATE TABLE output (consumer text)")
        outcome: list[BaseException | None] = []
        with first.transaction():
            poller.store_checkpoint(first, "counts", poller.Checkpoint(1, 1))
        with first.transaction():
            first.execute("INSERT INTO output VALUES ('first')")
            poller.store_checkpoint(first, "counts", poller.Checkpoint(2, 2))

            def race() -> None:
                try:
                    with second.transaction():
                        second.execute("INSERT INTO output VALUES ('second')")
                        poller.store_checkpoint(second, "counts", poller.Checkpoint(2, 2))
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
