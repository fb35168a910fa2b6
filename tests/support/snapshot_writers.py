"""Writers whose transactions press on what a snapshot knows: on a hot standby, the running
transactions are only those it has seen in the WAL, and a backend's 64-subxid cache overflows.

Each of `writers` threads runs transactions of three kinds, in random order and with random
commit delays, so commits land out of position order:
- plain: 1 to 3 messages;
- long: the xid taken first (`pg_current_xact_id()`, which writes no WAL), the messages a
  while later: meanwhile later xids reach the WAL, and a standby must count this one running
  although it has never seen it;
- subtransactions: more savepoints than the 64 a backend caches (each writing a message, so
  each takes a subxid: the primary logs them in XLOG_XACT_ASSIGNMENT records and the
  standby's snapshots are suboverflowed), about one in five rolled back to its savepoint.
Any transaction may roll back whole. What committed and what did not is kept by position.
"""

import random
import threading
import time
from dataclasses import dataclass

import psycopg

import outbox
from tests.support.writers import Written

# More than PGPROC_MAX_CACHED_SUBXIDS (64), PostgreSQL's per-backend subxid cache.
SUBTRANSACTIONS = (65, 90)


@dataclass(frozen=True)
class WriterMix:
    writers: int = 16
    transactions_per_writer: int = 20
    keys: int = 10
    long_share: float = 0.15
    subtransaction_share: float = 0.15
    rollback_share: float = 0.15
    seed: int = 29


def run_mixed_writers(url: str, publication: str, mix: WriterMix) -> Written:
    """Run every writer to its end; what they committed and rolled back."""
    written = Written()
    errors: list[BaseException] = []

    def write(seed: int) -> None:
        try:
            _write(url, publication, mix, random.Random(seed), written)
        except BaseException as error:  # handed to the test's thread
            errors.append(error)

    threads = [
        threading.Thread(target=write, args=(mix.seed * 1000 + n,), name=f"writer-{n}")
        for n in range(mix.writers)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return written


def _write(
    url: str, publication: str, mix: WriterMix, rng: random.Random, written: Written
) -> None:
    def message(conn: psycopg.Connection[object]) -> int:
        key = f"key-{rng.randrange(mix.keys)}"
        return outbox.append(conn, publication, "Mixed", {"n": rng.random()}, partition_key=key)

    with psycopg.connect(url) as conn:
        for _ in range(mix.transactions_per_writer):
            kind = rng.random()
            kept: list[int] = []
            dropped: list[int] = []
            with conn.transaction() as transaction:
                if kind < mix.long_share:
                    conn.execute("SELECT pg_current_xact_id()")
                    time.sleep(rng.uniform(0.1, 0.4))
                    kept += [message(conn) for _ in range(rng.randint(1, 3))]
                elif kind < mix.long_share + mix.subtransaction_share:
                    for _ in range(rng.randint(*SUBTRANSACTIONS)):
                        undone = rng.random() < 0.2
                        with conn.transaction() as savepoint:
                            (dropped if undone else kept).append(message(conn))
                            if undone:
                                raise psycopg.Rollback(savepoint)  # to the savepoint only
                else:
                    kept += [message(conn) for _ in range(rng.randint(1, 3))]
                time.sleep(rng.uniform(0, 0.02))
                rolled_back = rng.random() < mix.rollback_share
                if rolled_back:
                    raise psycopg.Rollback(transaction)
            written.add(kept, committed=not rolled_back)
            written.add(dropped, committed=False)
