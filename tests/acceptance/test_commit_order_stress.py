"""Writers serialised by row locks, as applications write, against `outbox poll` processes
killed and resharded: every account's messages arrive in the order of its sequence numbers.

Eight writer threads each run transactions that first write a row of their own (taking their
xid), then lock one of twelve accounts, raise its sequence number and append `{"seq": n}`
with the account as partition key. A transaction that took its xid before the account's
previous writer took its own commits after it, so ordered by writers' xids a later sequence
number often came first (557 of 8,387 messages in the issue's run). Meanwhile two pinned
daemons are SIGKILLed and restarted and the shard count changes 2 -> 3. The test counts:
- lost: committed messages never delivered (0);
- inversions: messages whose first delivery came before the first delivery of a smaller
  sequence number of the same account (0). Redeliveries after a kill repeat messages already
  delivered, so they never count.
"""

import random
import threading
from collections import defaultdict
from pathlib import Path

import psycopg
import pytest

import outbox
from poller import operations
from tests.support.cli import outbox_succeeds
from tests.support.daemons import create_handled_table, daemon_group, wait_until
from tests.support.databases import probe

pytestmark = pytest.mark.slow

WRITERS = 8
ACCOUNTS = 12
TRANSACTIONS_PER_WRITER = 120
PUBLICATION = "ledger"


def write_through_account_locks(url: str, writer: int, stop: threading.Event) -> None:
    chooser = random.Random(writer)
    with psycopg.connect(url) as conn:
        for _ in range(TRANSACTIONS_PER_WRITER):
            if stop.is_set():
                return
            account = f"account-{chooser.randrange(ACCOUNTS)}"
            conn.execute("INSERT INTO journal VALUES (%s)", [writer])  # the xid, first
            row = conn.execute(
                "UPDATE accounts SET sequence = sequence + 1 WHERE id = %s RETURNING sequence",
                [account],
            ).fetchone()
            assert row is not None
            outbox.append(conn, PUBLICATION, "Posted", {"seq": row[0]}, partition_key=account)
            conn.commit()


def handled_count(url: str) -> int:
    row = probe(url).execute("SELECT count(*) FROM handled").fetchone()
    assert row is not None
    return int(row[0])


def first_deliveries_by_account(url: str) -> dict[str, list[int]]:
    """Each account's sequence numbers in the order of their first delivery."""
    rows = (
        probe(url)
        .execute(
            "SELECT m.partition_key, (m.data ->> 'seq')::int"
            " FROM (SELECT position, min(id) AS first FROM handled GROUP BY position) AS h"
            " JOIN outbox.messages AS m USING (position) ORDER BY h.first"
        )
        .fetchall()
    )
    order: dict[str, list[int]] = defaultdict(list)
    for account, sequence in rows:
        order[account].append(sequence)
    return order


def inversions(order: dict[str, list[int]]) -> int:
    count = 0
    for sequences in order.values():
        highest = 0
        for sequence in sequences:
            if sequence < highest:
                count += 1
            highest = max(highest, sequence)
    return count


def test_row_locked_writers_keep_each_accounts_order_through_kills_and_a_reshard(
    database_url: str, tmp_path: Path
) -> None:
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE journal (writer int NOT NULL)")
        conn.execute("CREATE TABLE accounts (id text PRIMARY KEY, sequence int NOT NULL)")
        conn.execute(
            "INSERT INTO accounts SELECT 'account-' || n, 0 FROM generate_series(0, %s) AS n",
            [ACCOUNTS - 1],
        )
        settings = {"strategy": "pinned", "consumers": 4, "checkpoint_after": 0.2}
        operations.create(conn, "books", PUBLICATION, "start", settings, shards=2)
    create_handled_table(database_url)
    stop = threading.Event()
    writers = [
        threading.Thread(target=write_through_account_locks, args=(database_url, n, stop))
        for n in range(WRITERS)
    ]
    with daemon_group(database_url, tmp_path) as daemons:
        first = daemons.start("books")
        second = daemons.start("books")
        for writer in writers:
            writer.start()
        try:
            # Each fault once deliveries have moved on since the last: two kills, a reshard.
            for fault in ("kill first", "kill second", "reshard"):
                seen = handled_count(database_url)
                wait_until(
                    lambda seen=seen: handled_count(database_url) >= seen + 150,  # type: ignore[misc]
                    60,
                    f"deliveries before the fault {fault!r}",
                )
                if fault == "reshard":
                    outbox_succeeds(
                        database_url, "subscription", "update", "books", "--shards", "3"
                    )
                else:
                    (first if fault == "kill first" else second).kill()
                    daemons.start("books")
        except BaseException:
            stop.set()  # the writers' threads end at their next transaction
            raise
        finally:
            for writer in writers:
                writer.join(timeout=120)
        committed = {
            row[0]
            for row in probe(database_url)
            .execute(
                "SELECT position FROM outbox.messages WHERE publication_id = %s", [PUBLICATION]
            )
            .fetchall()
        }
        assert len(committed) == WRITERS * TRANSACTIONS_PER_WRITER
        wait_until(
            lambda: (
                {row[0] for row in probe(database_url).execute("SELECT position FROM handled")}
                >= committed
            ),
            90,
            "every committed message to be delivered",
        )
        layout = "SELECT shard_count, draining_shard_count FROM outbox.subscriptions"
        wait_until(
            lambda: probe(database_url).execute(layout).fetchone() == (3, None),
            30,
            "the change to three shards to end",
        )
    order = first_deliveries_by_account(database_url)
    lost = len(committed) - sum(len(sequences) for sequences in order.values())
    assert (lost, inversions(order)) == (0, 0), daemons.logs()[-3000:]
