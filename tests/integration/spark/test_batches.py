"""Batch ends and split points on a real PostgreSQL, without Spark."""

from typing import Any

import psycopg

from outbox.positions import START, Position
from outbox_spark.batches import batch_end, split_points
from outbox_spark.copy_reader import read_slice
from outbox_spark.options import CopyDriver
from outbox_spark.partitions import range_slices
from tests.integration.spark.writes import (
    append_committed,
    append_in_transaction,
    wait_until_quiet,
)


def read_positions(url: str, publication: str, slices: list[Any]) -> list[list[Position]]:
    return [
        [
            Position(tx, pos)
            for batch in read_slice(url, publication, part, CopyDriver.ADBC, proof=None)
            for pos, tx in zip(
                batch.column("position").to_pylist(),
                batch.column("transaction_id").to_pylist(),
                strict=True,
            )
        ]
        for part in slices
    ]


def test_a_batch_ends_below_the_oldest_running_transaction(database_url: str) -> None:
    before = append_committed(database_url, "orders", 3)
    wait_until_quiet(database_url)
    with psycopg.connect(database_url) as holder:
        (held,) = append_in_transaction(holder, "orders", 1)
        # Commits after `held` began: a later transaction id, so held back with it.
        after = append_committed(database_url, "orders", 2)
        with psycopg.connect(database_url, autocommit=True) as conn:
            assert batch_end(conn, "orders", START, None, proof=None) == before[-1]
            assert batch_end(conn, "orders", START, 2, proof=None) == before[1]
            assert batch_end(conn, "orders", before[-1], None, proof=None) is None
        holder.commit()
    wait_until_quiet(database_url)
    with psycopg.connect(database_url, autocommit=True) as conn:
        assert batch_end(conn, "orders", before[-1], 1, proof=None) == held
        assert batch_end(conn, "orders", START, None, proof=None) == after[-1]
        assert batch_end(conn, "orders", START, 100, proof=None) == after[-1]
        assert batch_end(conn, "invoices", START, None, proof=None) is None


def test_rolled_back_rows_never_end_a_batch(database_url: str) -> None:
    committed = append_committed(database_url, "orders", 2)
    with psycopg.connect(database_url) as conn:
        append_in_transaction(conn, "orders", 3)
        conn.rollback()
    wait_until_quiet(database_url)
    with psycopg.connect(database_url, autocommit=True) as conn:
        assert batch_end(conn, "orders", START, None, proof=None) == committed[-1]
        assert batch_end(conn, "orders", committed[-1], 5, proof=None) is None


def test_transaction_ids_compare_as_numbers_not_text(database_url: str) -> None:
    """A checkpoint with fewer digits precedes the rows although it sorts after them as text;
    one with more digits follows them although it sorts before them as text. Both are derived
    from the rows' own transaction id, so the test holds on a cluster of any age."""
    rows = append_committed(database_url, "orders", 2)
    wait_until_quiet(database_url)
    digits = len(str(rows[0].transaction_id))
    # As text, "99..9" sorts after the id and "10..0" before it (for any id but 10^k or
    # all nines), the opposite of their numeric order.
    shorter, longer = int("9" * (digits - 1)), 10**digits
    with psycopg.connect(database_url, autocommit=True) as conn:
        assert batch_end(conn, "orders", Position(shorter, 0), None, proof=None) == rows[-1]
        assert batch_end(conn, "orders", Position(longer, 0), None, proof=None) is None


def test_split_points_cut_a_batch_into_slices_of_equal_rows(database_url: str) -> None:
    rows = [row for _ in range(10) for row in append_committed(database_url, "orders", 100)]
    start = rows[99]  # a batch starting after the first transaction
    wait_until_quiet(database_url)
    with psycopg.connect(database_url, autocommit=True) as conn:
        end = batch_end(conn, "orders", start, None, proof=None)
        assert end == rows[-1]
        points = split_points(conn, "orders", start, end, 4)
        assert split_points(conn, "orders", start, end, 1) == []
        assert split_points(conn, "orders", rows[-3], end, 4) == [rows[-2]]  # fewer rows
    assert len(points) == 3

    slices = read_positions(database_url, "orders", range_slices(start, end, points))

    assert [len(part) for part in slices] == [225, 225, 225, 225]
    assert [row for part in slices for row in part] == rows[100:]


def test_split_points_of_interleaved_writers_leave_slices_of_about_equal_rows(
    database_url: str,
) -> None:
    """Cuts are rows at evenly spaced positions, not counted ones: two writers whose
    transactions overlap and commit out of order, with another publication's rows between
    theirs, still give four slices of about a quarter of the batch each, every row in one."""
    with psycopg.connect(database_url) as first, psycopg.connect(database_url) as second:
        for _ in range(100):
            append_in_transaction(first, "orders", 2)
            append_in_transaction(second, "orders", 3)
            append_in_transaction(first, "invoices", 1)
            second.commit()
            first.commit()
    wait_until_quiet(database_url)
    with psycopg.connect(database_url, autocommit=True) as conn:
        rows = [
            Position(*row)
            for row in conn.execute(
                "SELECT transaction_id::text::bigint, position FROM outbox.messages"
                " WHERE publication_id = 'orders' ORDER BY 1, 2"
            )
        ]
        end = batch_end(conn, "orders", START, None, proof=None)
        assert end is not None
        points = split_points(conn, "orders", START, end, 4)

    slices = read_positions(database_url, "orders", range_slices(START, end, points))

    assert sorted(row for part in slices for row in part) == rows
    assert all(abs(len(part) - len(rows) / 4) <= len(rows) / 40 for part in slices), [
        len(part) for part in slices
    ]
