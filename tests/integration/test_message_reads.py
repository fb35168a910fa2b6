"""The read connection as the daemon sets it up: rows in binary, `appended_at` in UTC."""

import datetime

import psycopg

import outbox
from outbox.positions import START
from poller.store.message_reads import (
    prepare_reader,
    prepare_reader_async,
    read_batch,
    read_batch_async,
)

ZONE = "-c TimeZone=Asia/Kolkata"  # +05:30: an offset that no UTC reading could hide


def appended(database_url: str) -> tuple[int, datetime.datetime]:
    with psycopg.connect(database_url, options=ZONE) as conn:
        position = outbox.append(
            conn, "orders", "Placed", {"total": 12.5, "note": "ü"}, partition_key="c-1"
        )
        row = conn.execute(
            "SELECT appended_at FROM outbox.messages WHERE position = %s", (position,)
        ).fetchone()
    assert row is not None
    stored: datetime.datetime = row[0]
    assert stored.utcoffset() == datetime.timedelta(hours=5, minutes=30)
    return position, stored


def test_a_read_gives_every_column_and_appended_at_in_utc(database_url: str) -> None:
    position, stored = appended(database_url)
    with psycopg.connect(database_url, autocommit=True, options=ZONE) as conn:
        prepare_reader(conn)
        [message] = read_batch(conn, "orders", START, 10)
    assert (message.position, message.message_type, message.partition_key) == (
        position,
        "Placed",
        "c-1",
    )
    assert message.transaction_id > 0
    assert message.data == {"total": 12.5, "note": "ü"}
    assert message.appended_at.utcoffset() == datetime.timedelta(0)
    assert message.appended_at == stored  # the same instant


async def test_the_daemons_async_read_gives_the_same_message(database_url: str) -> None:
    position, stored = appended(database_url)
    async with await psycopg.AsyncConnection.connect(
        database_url, autocommit=True, options=ZONE
    ) as conn:
        await prepare_reader_async(conn)
        [message] = await read_batch_async(conn, "orders", START, 10)
    assert (message.position, message.data["note"]) == (position, "ü")
    assert message.appended_at.utcoffset() == datetime.timedelta(0)
    assert message.appended_at == stored


def test_the_read_is_planned_once_not_at_every_execution(database_url: str) -> None:
    """psycopg prepares a query at its fifth execution, and PostgreSQL then planned every
    execution of the read afresh (a custom plan each time), probing the end of the index
    behind the checkpoint for its highest value: most of a read's cost once writers add rows
    there. The read connection keeps one generic plan."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO outbox.messages (publication_id, message_id, message_type, data)"
            " SELECT 'planned', n::text, 'T', '{}' FROM generate_series(1, 20000) AS n"
        )
        conn.execute("ANALYZE outbox.messages")
        prepare_reader(conn)
        [last] = read_batch(conn, "planned", START, 20000)[-1:]
        for _ in range(20):
            assert read_batch(conn, "planned", last.at, 500) == []
        plans = conn.execute(
            "SELECT generic_plans, custom_plans FROM pg_prepared_statements"
            " WHERE statement LIKE %s",
            ("%FROM outbox.messages%",),
        ).fetchall()
    [(generic, custom)] = plans
    assert (generic, custom) == (20 - 4, 0)
