"""The core claim: reading below pg_snapshot_xmin misses nothing, whatever the commit order."""

import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

from outbox_cli.demo.workload import WorkloadShape, read_until, run_writers

SHAPE = WorkloadShape(writers=16, transactions_per_writer=20, max_commit_delay=0.02, seed=11)


def test_every_committed_message_is_read_once_in_order_and_naive_reading_loses_some(
    database_url: str,
) -> None:
    writers_done = threading.Event()
    with ThreadPoolExecutor(max_workers=2) as readers:
        safe = readers.submit(read_until, database_url, "demo", writers_done, naive=False)
        naive = readers.submit(read_until, database_url, "demo", writers_done, naive=True)
        tally = run_writers(database_url, "demo", SHAPE)
        writers_done.set()
        safe_read, naive_read = safe.result(timeout=60), naive.result(timeout=60)

    assert tally.committed, "the workload committed nothing"
    assert tally.rolled_back, "the workload rolled nothing back"

    # Safe reader: exactly the committed set, each once, in (transaction_id, position) order.
    assert Counter(safe_read.positions) == Counter(tally.committed)
    assert safe_read.order == sorted(safe_read.order)

    # Naive reader on the same run: commits really were reordered, so it skipped rows.
    naive_lost = tally.committed - set(naive_read.positions)
    assert naive_lost, "no commit was reordered: the workload does not exercise the hazard"
    assert not set(naive_read.positions) & tally.rolled_back
