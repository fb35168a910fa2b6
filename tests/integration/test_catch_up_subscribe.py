"""poller.subscribe and subscribe_sync over a real PostgreSQL: catch-up, CaughtUp, live
messages, checkpoint signals, filters and start positions."""

import asyncio
from collections.abc import AsyncGenerator

import psycopg
import pytest

import outbox
import poller
from poller.catch_up.stream import Item
from tests.support.writers import append_committed

PUBLICATION = "orders"


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
