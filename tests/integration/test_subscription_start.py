"""`--from end` starts at the safe frontier, never at the newest visible row: a transaction still
open below the newest row would otherwise be skipped when it commits (a peer shipped that bug)."""

import psycopg

import outbox
from poller import operations
from poller.store.message_reads import read_batch


def test_from_end_does_not_skip_a_transaction_open_below_the_newest_row(
    database_url: str,
) -> None:
    with psycopg.connect(database_url) as slow, psycopg.connect(database_url) as fast:
        late = outbox.append(slow, "orders", "Late", {})  # holds an older xid, open
        newest = outbox.append(fast, "orders", "Newest", {})
        fast.commit()  # the newest visible row is now past the open transaction's row
        with psycopg.connect(database_url) as admin:
            start = operations.create(admin, "from-end", "orders", "end", {})
        slow.commit()
    with psycopg.connect(database_url, autocommit=True) as reader:
        delivered = [m.position for m in read_batch(reader, "orders", start, 100)]
    assert delivered == [late, newest]


def test_from_end_skips_what_was_committed_before_it(database_url: str) -> None:
    with psycopg.connect(database_url) as conn:
        outbox.append(conn, "orders", "Old", {})
    with psycopg.connect(database_url) as admin:
        start = operations.create(admin, "from-end", "orders", "end", {})
    with psycopg.connect(database_url) as conn:
        fresh = outbox.append(conn, "orders", "New", {})
    with psycopg.connect(database_url, autocommit=True) as reader:
        assert [m.position for m in read_batch(reader, "orders", start, 100)] == [fresh]
