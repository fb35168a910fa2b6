"""outbox.widen_xid: 32-bit xids of running transactions widened to the xid8 the outbox stores."""

import psycopg
import pytest

EPOCH = 2**32

# (running xid, next xid8, expected xid8). Any running xid is within 2^31 of the next xid.
WIDENINGS = [
    pytest.param(4294967286, EPOCH + 5, EPOCH - 10, id="running-before-an-epoch-boundary"),
    pytest.param(105, EPOCH + 100, EPOCH + 105, id="running-slightly-ahead-of-next"),
    pytest.param(1005, 1000, 1005, id="running-ahead-of-next-in-epoch-0"),
    pytest.param(3, 2 * EPOCH - 2, 2 * EPOCH + 3, id="running-ahead-across-an-epoch-boundary"),
    pytest.param(7, EPOCH + 7, EPOCH + 7, id="running-equal-to-next"),
    pytest.param(11, 5 * EPOCH + 2**31 + 10, 5 * EPOCH + 11, id="running-2^31-1-behind"),
    pytest.param(
        2**31 + 10, 5 * EPOCH + 10, 4 * EPOCH + 2**31 + 10, id="running-2^31-behind-in-last-epoch"
    ),
    # Only a corrupt input could land before the first epoch; the result stays a normal xid.
    pytest.param(4294967000, 100, 3, id="before-epoch-0-clamps-to-the-first-normal-xid"),
]


@pytest.mark.parametrize(("running", "next_xid", "expected"), WIDENINGS)
def test_widen_xid_around_takes_the_nearest_full_xid(
    database_url: str, running: int, next_xid: int, expected: int
) -> None:
    with psycopg.connect(database_url) as conn:
        row = conn.execute(
            "SELECT outbox.widen_xid_around(%s::text::xid, %s::text::xid8)::text",
            (str(running), str(next_xid)),
        ).fetchone()
    assert row == (str(expected),)


def test_blocking_transactions_shows_each_open_transactions_own_xid8(database_url: str) -> None:
    # Two open transactions holding xids: the newer one's xid is at or above the snapshot xmax
    # (xmax is latestCompletedXid + 1, and neither has completed).
    with psycopg.connect(database_url) as first, psycopg.connect(database_url) as second:
        held = {}
        for conn in (first, second):
            row = conn.execute("SELECT pg_backend_pid(), pg_current_xact_id()::text").fetchone()
            assert row is not None
            held[row[0]] = row[1]
        with psycopg.connect(database_url) as observer:
            shown = observer.execute(
                "SELECT pid, transaction_id::text FROM outbox.blocking_transactions"
                " WHERE pid = ANY(%s)",
                (list(held),),
            ).fetchall()
            # Reading the view must not burn an xid of its own.
            burned = observer.execute("SELECT pg_current_xact_id_if_assigned()").fetchone()
    assert dict(shown) == held
    assert burned == (None,)
