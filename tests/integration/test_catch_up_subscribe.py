"""poller.subscribe and subscribe_sync over a real PostgreSQL: catch-up, CaughtUp, live
messages, checkpoint signals, filters and start positions."""

import asyncio
import time
from collections.abc import AsyncGenerator

import psycopg
import pytest

import outbox
import poller
from poller.catch_up.stream import Filter, Item, Plan, stream
from poller.store.message_reads import safe_frontier
from tests.support.writers import append_committed

PUBLICATION = "orders"


def wait_until_readable(url: str) -> None:
    """Until every committed row is below the safe frontier: on a shared server another
    session's transaction can hold the cluster-wide frontier back, and a row above it is not
    backlog yet (it would come after CaughtUp, as live)."""
    with psycopg.connect(url, autocommit=True) as conn:
        newest = conn.execute(
            "SELECT max(transaction_id)::text::bigint FROM outbox.messages"
        ).fetchone()
        assert newest is not None
        deadline = time.monotonic() + 30
        while safe_frontier(conn) <= newest[0]:
            assert time.monotonic() < deadline
            time.sleep(0.01)


async def next_item(items: AsyncGenerator[Item], timeout: float = 10.0) -> Item:
    return await asyncio.wait_for(anext(items), timeout)


async def nothing_within(items: AsyncGenerator[Item], seconds: float) -> bool:
    try:
        await asyncio.wait_for(anext(items), seconds)
    except TimeoutError:
        return True
    return False


async def test_interval_5_gives_one_checkpoint_after_5_live_messages_after_caught_up(
    database_url: str,
) -> None:
    backlog = append_committed(database_url, PUBLICATION, 3)
    wait_until_readable(database_url)
    items = poller.subscribe(
        database_url, PUBLICATION, checkpoint_interval=5, checkpoint_timeout=60
    )
    caught_up = [await next_item(items) for _ in range(4)]
    assert [m.position for m in caught_up[:3] if isinstance(m, poller.Message)] == backlog
    assert caught_up[3] == poller.CaughtUp()

    live = append_committed(database_url, PUBLICATION, 5)
    received = [await next_item(items) for _ in range(6)]
    messages = [item for item in received[:5] if isinstance(item, poller.Message)]
    assert [m.position for m in messages] == live
    assert received[5] == poller.Checkpoint(messages[-1].transaction_id, messages[-1].position)
    assert await nothing_within(items, 0.5)
    await items.aclose()


def test_the_sync_twin_yields_the_same_stream(database_url: str) -> None:
    backlog = append_committed(database_url, PUBLICATION, 2)
    wait_until_readable(database_url)
    items = poller.subscribe_sync(
        database_url, PUBLICATION, checkpoint_interval=2, checkpoint_timeout=60
    )
    first = [next(items) for _ in range(3)]
    assert [m.position for m in first if isinstance(m, poller.Message)] == backlog
    assert first[2] == poller.CaughtUp()
    live = append_committed(database_url, PUBLICATION, 2)
    second = [next(items) for _ in range(3)]
    assert [m.position for m in second if isinstance(m, poller.Message)] == live
    assert isinstance(second[2], poller.Checkpoint)
    assert second[2].position == live[-1]
    items.close()


def test_a_checkpoint_resumes_exactly_after_itself(database_url: str) -> None:
    append_committed(database_url, PUBLICATION, 4)
    wait_until_readable(database_url)
    with psycopg.connect(database_url) as conn:
        rows = conn.execute(
            "SELECT transaction_id::text::bigint, position FROM outbox.messages ORDER BY position"
        ).fetchall()
    resume = poller.Checkpoint(*rows[1])
    items = poller.subscribe_sync(database_url, PUBLICATION, start=resume)
    received = [next(items) for _ in range(3)]
    items.close()
    assert [(m.transaction_id, m.position) for m in received[:2]] == [tuple(r) for r in rows[2:]]  # type: ignore[union-attr]
    assert received[2] == poller.CaughtUp()


def test_start_end_skips_the_backlog(database_url: str) -> None:
    append_committed(database_url, PUBLICATION, 3)
    wait_until_readable(database_url)
    items = poller.subscribe_sync(database_url, PUBLICATION, start="end")
    assert next(items) == poller.CaughtUp()
    live = append_committed(database_url, PUBLICATION, 1)
    message = next(items)
    items.close()
    assert isinstance(message, poller.Message)
    assert message.position == live[0]


def test_bad_arguments_fail_at_the_call(database_url: str) -> None:
    with pytest.raises(ValueError, match="checkpoint_interval=0"):
        poller.subscribe_sync(database_url, PUBLICATION, checkpoint_interval=0)
    with pytest.raises(ValueError, match="start='middle'"):
        poller.subscribe(database_url, PUBLICATION, start="middle")
    with pytest.raises(ValueError, match="message_types='OrderPlaced' is a string"):
        poller.subscribe(database_url, PUBLICATION, message_types="OrderPlaced")


def test_a_filtered_subscription_checkpoint_carries_the_scanned_position(
    database_url: str,
) -> None:
    items = poller.subscribe_sync(
        database_url,
        PUBLICATION,
        message_types=["Rare"],
        checkpoint_interval=1000,
        checkpoint_timeout=0.3,
    )
    assert next(items) == poller.CaughtUp()
    # One transaction: the skipped rows are read in the same batch as the rare one, before
    # the idle timeout can fire.
    with psycopg.connect(database_url) as conn:
        outbox.append(conn, PUBLICATION, "Rare", {})
        skipped = [outbox.append(conn, PUBLICATION, "Common", {}) for _ in range(3)]
    rare = next(items)
    checkpoint = next(items)
    items.close()
    assert isinstance(rare, poller.Message)
    assert rare.message_type == "Rare"
    assert isinstance(checkpoint, poller.Checkpoint)
    assert checkpoint.position == skipped[-1]


def test_no_checkpoint_during_catch_up(database_url: str) -> None:
    append_committed(database_url, PUBLICATION, 10)
    wait_until_readable(database_url)
    items = poller.subscribe_sync(
        database_url, PUBLICATION, checkpoint_interval=3, checkpoint_timeout=0.01
    )
    backlog = [next(items) for _ in range(11)]
    items.close()
    assert all(isinstance(item, poller.Message) for item in backlog[:10])
    assert backlog[10] == poller.CaughtUp()


def test_closing_the_sync_iterator_releases_its_connections(database_url: str) -> None:
    items = poller.subscribe_sync(database_url, PUBLICATION)
    assert next(items) == poller.CaughtUp()
    query = (
        "SELECT count(*) FROM pg_stat_activity"
        " WHERE datname = current_database() AND application_name LIKE 'outbox-poller:subscribe%'"
    )
    with psycopg.connect(database_url, autocommit=True) as conn:
        deadline = time.monotonic() + 10
        while conn.execute(query).fetchone() != (2,):  # the reads and the LISTEN
            assert time.monotonic() < deadline
            time.sleep(0.01)
        items.close()
        # A backend leaves pg_stat_activity a moment after its client closed it.
        while conn.execute(query).fetchone() != (0,):
            assert time.monotonic() < deadline + 5, "a connection outlived the iterator"
            time.sleep(0.01)


def test_a_lost_connection_is_opened_again_without_skipping_or_repeating(
    database_url: str,
) -> None:
    items = poller.subscribe_sync(database_url, PUBLICATION, checkpoint_interval=1000)
    assert next(items) == poller.CaughtUp()
    before = append_committed(database_url, PUBLICATION, 3)
    received = [next(items) for _ in range(3)]
    with psycopg.connect(database_url, autocommit=True) as conn:
        terminated = conn.execute(
            "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity"
            " WHERE datname = current_database()"
            " AND application_name LIKE 'outbox-poller:subscribe%'"
        ).fetchone()
    assert terminated == (2,)  # the reads and the LISTEN
    after = append_committed(database_url, PUBLICATION, 3)
    received += [next(items) for _ in range(3)]
    items.close()
    assert [m.position for m in received if isinstance(m, poller.Message)] == before + after


def test_an_unreachable_database_fails_the_first_read_at_once() -> None:
    items = poller.subscribe_sync("postgresql://postgres@127.0.0.1:1/nowhere", PUBLICATION)
    started = time.monotonic()
    with pytest.raises(psycopg.OperationalError):
        next(items)
    assert time.monotonic() - started < 10  # not retried: waiting cannot fix it


async def test_one_live_message_then_silence_gives_one_checkpoint_when_the_clock_passes_the_timeout(
    database_url: str,
) -> None:
    """The driver over PostgreSQL with a controlled clock: interval 1000, timeout 1 s."""
    now = [0.0]
    plan = Plan(database_url, PUBLICATION, "start", Filter(), 1000, 1.0)
    items = stream(plan, clock=lambda: now[0])
    assert await next_item(items) == poller.CaughtUp()
    (live,) = append_committed(database_url, PUBLICATION, 1)
    message = await next_item(items)
    assert isinstance(message, poller.Message)
    assert message.position == live
    # The delivery counts as done when the caller asks for the next item, at 0.
    pending = asyncio.ensure_future(anext(items))
    await asyncio.sleep(0.1)
    now[0] = 0.999
    await asyncio.sleep(0.3)  # several polls, in real time, before the timeout
    assert not pending.done()
    now[0] = 1.0  # no further message: the clock alone passes the timeout
    assert await asyncio.wait_for(pending, 10) == poller.Checkpoint(
        message.transaction_id, message.position
    )
    now[0] = 100.0
    assert await nothing_within(items, 0.3)  # once, not again
    await items.aclose()


async def wait_for_a_read(url: str, timeout: float = 30.0) -> None:
    """Until the subscription's read connection has run a read and is idle after it."""
    conn = await psycopg.AsyncConnection.connect(url, autocommit=True)
    async with conn:
        deadline = time.monotonic() + timeout
        while True:
            cursor = await conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                " AND application_name = 'outbox-poller:subscribe' AND state = 'idle'"
                " AND query LIKE '%%ORDER BY m.transaction_id, m.position%%'"
            )
            if await cursor.fetchone() == (1,):
                return
            assert time.monotonic() < deadline, "the subscription read nothing"
            await asyncio.sleep(0.01)


async def test_caught_up_comes_after_rows_committed_before_subscribe_behind_an_older_transaction(
    database_url: str,
) -> None:
    """An older transaction holds the safe frontier below rows committed before subscribe():
    those rows are backlog, so CaughtUp waits until they can be read and follows them."""
    with psycopg.connect(database_url, autocommit=True) as older:
        older.execute("BEGIN")
        older.execute("SELECT pg_current_xact_id()")  # an xid below every backlog row's
        backlog = append_committed(database_url, PUBLICATION, 3)
        items = poller.subscribe(database_url, PUBLICATION)
        first = asyncio.ensure_future(anext(items))
        await wait_for_a_read(database_url)  # it has looked while the rows were hidden
        older.execute("COMMIT")
        received = [await asyncio.wait_for(first, 10)]
        received += [await next_item(items) for _ in range(3)]
    await items.aclose()
    assert [item.position for item in received[:3] if isinstance(item, poller.Message)] == backlog
    assert received[3] == poller.CaughtUp()
