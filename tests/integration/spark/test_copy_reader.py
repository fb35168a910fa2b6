"""Reading slices through COPY with both drivers, on a real PostgreSQL."""

import time
from collections import defaultdict
from typing import Any

import psycopg
import pyarrow as pa
import pytest

import outbox
from outbox.positions import START, Position
from outbox.read_servers import ReadProof, server_state
from outbox_spark.arrow_schema import ARROW_SCHEMA
from outbox_spark.copy_reader import APPLICATION_NAME, read_slice
from outbox_spark.options import CopyDriver
from outbox_spark.partitions import Slice, key_slices
from outbox_spark.retired_ranges import RetiredRangeError
from outbox_spark.standby_reads import replayed_past, replayed_statement
from tests.integration.spark.writes import append_committed, append_in_transaction

DRIVERS = [CopyDriver.ADBC, CopyDriver.PSYCOPG]


def read_table(url: str, publication: str, part: Slice, driver: CopyDriver) -> pa.Table:
    return pa.Table.from_batches(
        list(read_slice(url, publication, part, driver, proof=None)), ARROW_SCHEMA
    )


@pytest.mark.parametrize("driver", DRIVERS)
def test_awkward_text_survives_the_copy_exactly(database_url: str, driver: CopyDriver) -> None:
    publication = "it's a \\ publication"
    awkward = 'line\nbreak, "quoted", comma; tab\tand ünïcode ✓'
    with psycopg.connect(database_url) as conn:
        outbox.append_many(
            conn,
            publication,
            [
                outbox.NewMessage(
                    "Odd", {"text": awkward}, message_id=awkward, partition_key=awkward
                ),
                outbox.NewMessage("Plain", {}, headers={"h": "v"}),
            ],
        )
        expected = conn.execute(
            "SELECT position, transaction_id::text::bigint, publication_id, message_id,"
            " message_type, partition_key, data::text, headers::text, appended_at"
            " FROM outbox.messages ORDER BY position"
        ).fetchall()
    part = Slice(START, Position(expected[-1][1], expected[-1][0]))

    table = read_table(database_url, publication, part, driver)

    assert table.schema.equals(ARROW_SCHEMA)
    assert [tuple(row.values()) for row in table.to_pylist()] == expected
    assert table.column("partition_key").to_pylist()[1] is None


def interleaved_rows(database_url: str) -> list[Position]:
    """Rows whose (transaction_id, position) order differs from their position order."""
    rows: list[Position] = []
    with psycopg.connect(database_url) as first, psycopg.connect(database_url) as second:
        for n in range(3):
            rows += append_in_transaction(first, "orders", 5, key=f"key-{n}")
            rows += append_in_transaction(second, "orders", 5, key=f"key-{n + 1}")
            rows += append_in_transaction(second, "orders", 2)  # keyless
        first.commit()
        second.commit()
    assert sorted(rows) != sorted(rows, key=lambda row: row.position)
    return sorted(rows)


def stored_rows(database_url: str) -> list[Position]:
    with psycopg.connect(database_url) as conn:
        found = conn.execute(
            "SELECT transaction_id::text::bigint, position FROM outbox.messages"
            " ORDER BY transaction_id, position"
        ).fetchall()
    return [Position(transaction_id, position) for transaction_id, position in found]


@pytest.mark.parametrize("driver", DRIVERS)
def test_key_buckets_keep_each_key_in_one_bucket_in_delivery_order(
    database_url: str, driver: CopyDriver
) -> None:
    rows = interleaved_rows(database_url)
    buckets_of_key: dict[str | None, set[int]] = defaultdict(set)
    read: list[Position] = []
    for part in key_slices(START, rows[-1], 3):
        table = read_table(database_url, "orders", part, driver)
        positions = [Position(row["transaction_id"], row["position"]) for row in table.to_pylist()]
        assert positions == sorted(positions)
        for key in table.column("partition_key").to_pylist():
            buckets_of_key[key].add(part.bucket)
        read += positions

    # Once, in a whole run, the read held (88185, 13) where (88184, 13) was expected: the
    # stored rows say whether the read or the expectation was wrong, should it happen again.
    assert sorted(read) == rows, f"read {sorted(read)}, stored {stored_rows(database_url)}"
    assert all(len(buckets) == 1 for key, buckets in buckets_of_key.items() if key is not None)
    assert len(set().union(*buckets_of_key.values())) > 1  # the keys did spread


def our_backends(conn: psycopg.Connection[Any]) -> list[int]:
    rows = conn.execute(
        "SELECT pid FROM pg_stat_activity WHERE application_name = %s"
        " AND datname = current_database()",
        [APPLICATION_NAME],
    ).fetchall()
    return [pid for (pid,) in rows]


@pytest.mark.parametrize("driver", DRIVERS)
def test_stopping_early_ends_the_copy_on_the_server(database_url: str, driver: CopyDriver) -> None:
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO outbox.messages (publication_id, message_id, message_type, data)"
            " SELECT 'big', n::text, 'T', jsonb_build_object('pad', repeat('x', 200))"
            " FROM generate_series(1, 200000) AS n"
        )
        end = conn.execute(
            "SELECT transaction_id::text::bigint, max(position) FROM outbox.messages"
            " GROUP BY transaction_id"
        ).fetchone()
        assert end is not None
        batches = read_slice(database_url, "big", Slice(START, Position(*end)), driver, proof=None)
        first = next(batches)
        assert 0 < first.num_rows < 200000  # the rest is still on its way
        assert len(our_backends(conn)) == 1

        batches.close()  # what Spark does when a task stops consuming

        deadline = time.monotonic() + 5
        while our_backends(conn) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert our_backends(conn) == []  # cancelled, and not kept


@pytest.mark.parametrize("driver", DRIVERS)
def test_a_checked_slice_fails_once_read_if_retention_dropped_rows_of_it(
    database_url: str, driver: CopyDriver
) -> None:
    # What a batch read's task finds when a retirement commits between planning and its COPY:
    # the rows are gone, and only the mark, raised in the same transaction, says so.
    rows = append_committed(database_url, "orders", 3)
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO outbox.retired_positions (publication_id, transaction_id, position)"
            " VALUES ('orders', %s::text::xid8, %s)",
            [str(rows[0].transaction_id), rows[0].position],
        )
    whole = Slice(START, rows[-1])

    assert read_table(database_url, "orders", whole, driver).num_rows == 3  # a stream's read
    with pytest.raises(RetiredRangeError, match=f"up to {rows[0]}, after the read's start"):
        list(read_slice(database_url, "orders", whole, driver, check_retired=True, proof=None))
    after_mark = Slice(rows[0], rows[-1])
    checked = list(
        read_slice(database_url, "orders", after_mark, driver, check_retired=True, proof=None)
    )
    assert sum(batch.num_rows for batch in checked) == 2


def test_a_worker_keeps_its_connection_for_the_next_task_and_replaces_a_dead_one(
    database_url: str,
) -> None:
    # ADBC's connect costs ~40 ms, which every task of every trigger would pay.
    rows = append_committed(database_url, "orders", 2)
    whole = Slice(START, rows[-1])
    with psycopg.connect(database_url, autocommit=True) as conn:
        assert read_table(database_url, "orders", whole, CopyDriver.ADBC).num_rows == 2
        kept = our_backends(conn)
        assert len(kept) == 1  # idle between tasks, in no transaction
        state = conn.execute(
            "SELECT state, backend_xmin FROM pg_stat_activity WHERE pid = %s", kept
        ).fetchone()
        assert state == ("idle", None)

        assert read_table(database_url, "orders", whole, CopyDriver.ADBC).num_rows == 2
        assert our_backends(conn) == kept

        conn.execute("SELECT pg_terminate_backend(%s)", kept)  # a restart, an idle timeout
        assert read_table(database_url, "orders", whole, CopyDriver.ADBC).num_rows == 2
        replaced = our_backends(conn)
        assert len(replaced) == 1
        assert replaced != kept


@pytest.mark.parametrize("driver", DRIVERS)
def test_a_slice_on_the_primary_reads_at_once_whatever_its_end(
    database_url: str, driver: CopyDriver
) -> None:
    """A primary has replayed nothing and needs to: whatever a slice's end, its rows are there
    (a batch end is chosen below the frontier of the primary or of a standby of it). The
    replay check waited 60 s for the primary's frontier to pass the end of a slice that ends
    past every row, as the spark bench's read of everything without Spark does, and raised
    ReplicaBehindError. Without readUrl a slice pays no check at all; with readUrl naming the
    primary, the check passes at once and still proves the server."""
    rows = append_committed(database_url, "orders", 3)
    far = Position(2**62, 2**62)
    with psycopg.connect(database_url, autocommit=True) as conn:
        primary = ReadProof(server_state(conn).identity, "the database itself")
        assert replayed_past(conn.execute(replayed_statement(far)).fetchone(), primary)
    everything = Slice(START, far)
    for proof in (None, primary):
        started = time.monotonic()
        read = list(read_slice(database_url, "orders", everything, driver, proof=proof))
        assert time.monotonic() - started < 10
        assert sum(batch.num_rows for batch in read) == len(rows)
