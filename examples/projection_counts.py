"""An exactly-once projection: how many messages of each type a publication holds, kept in a
table of the consumer's own.

    OUTBOX_DATABASE_URL=postgresql://... python examples/projection_counts.py orders

The counts and the position they stand for commit in one transaction, so a crash at any moment
(kill -9 included) loses nothing and counts nothing twice: a restart resumes exactly after the
last committed position. The README shows `project_counts`; a test kills this script at random
while writers commit out of order and compares the counts with what committed.
"""

import collections
import os
import sys

import psycopg

import poller


def project_counts(url: str, publication: str, consumer: str = "message_type_counts") -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE IF NOT EXISTS message_type_counts"
            " (message_type text PRIMARY KEY, count bigint NOT NULL)"
        )
        stored = poller.load_checkpoint(conn, consumer)
        counts: collections.Counter[str] = collections.Counter()
        last_read = None
        for item in poller.subscribe_sync(url, publication, start=stored or "start"):
            if isinstance(item, poller.Message):
                counts[item.message_type] += 1
                last_read = poller.Checkpoint(item.transaction_id, item.position)
            elif isinstance(item, poller.Checkpoint):
                stored = save(conn, consumer, counts, item, stored)
            elif last_read is not None:
                # CaughtUp: the backlog is counted. Checkpoints come only with live messages,
                # so save now rather than wait for the next one on a quiet publication.
                stored = save(conn, consumer, counts, last_read, stored)


def save(
    conn: psycopg.Connection[tuple[object, ...]],
    consumer: str,
    counts: collections.Counter[str],
    checkpoint: poller.Checkpoint,
    previous: poller.Checkpoint | None,
) -> poller.Checkpoint:
    """The counts since the last save and the position just after them commit together, or
    neither does; and only if the stored position is still `previous`, the one this process
    started from or saved last (else another process counts them: ConsumerPositionConflictError
    rolls this back)."""
    with conn.transaction():
        for message_type, count in counts.items():
            conn.execute(
                "INSERT INTO message_type_counts VALUES (%s, %s)"
                " ON CONFLICT (message_type) DO UPDATE"
                " SET count = message_type_counts.count + excluded.count",
                (message_type, count),
            )
        poller.store_checkpoint(conn, consumer, checkpoint, previous=previous)
    counts.clear()
    return checkpoint


if __name__ == "__main__":
    project_counts(os.environ["OUTBOX_DATABASE_URL"], sys.argv[1])
