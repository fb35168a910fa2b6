"""`outbox tail`'s screen, driven as a person uses it (Textual's Pilot) over a real PostgreSQL:
messages are written, and the tests read what the screen shows."""

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import psycopg
import pytest

import outbox
from outbox_cli.tail.app import Event, TailApp
from outbox_cli.tail.row_view import RowView
from poller import CaughtUp, subscribe
from tests.support.safe_frontier import wait_until_all_rows_are_backlog
from tests.support.screen import rows_starting_with, screen_lines, wait_for_screen
from tests.support.writers import append_committed

SCREEN = (140, 36)
# Count-based checkpoints only: an idle checkpoint would land at a moment the test does not
# control.
NO_IDLE_CHECKPOINT = 3600.0


def events(url: str, *, interval: int = 100) -> AsyncIterator[Event]:
    return subscribe(
        url, "orders", checkpoint_interval=interval, checkpoint_timeout=NO_IDLE_CHECKPOINT
    )


async def held_at_caught_up(
    source: AsyncIterator[Event], release: asyncio.Event
) -> AsyncIterator[Event]:
    """The real subscription, paused before its CaughtUp until `release`: the screen can be
    read while it is still catching up, however fast the backlog is read."""
    async for event in source:
        if isinstance(event, CaughtUp):
            await release.wait()
        yield event


def written_before_subscribing(url: str, count: int) -> None:
    append_committed(url, "orders", count)
    wait_until_all_rows_are_backlog(url)


def transaction_ids(url: str) -> dict[int, int]:
    """Each message's transaction id, by position, as the database has it."""
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT position, transaction_id::text::bigint FROM outbox.messages"
        ).fetchall()
    return dict(rows)


def message_rows(lines: list[str]) -> list[list[str]]:
    """The message rows on screen, split into their columns (position first)."""
    return [line.split() for line in lines if line[:1].isdigit()]


def shown_rows(lines: list[str]) -> list[str]:
    """Message rows as their position and checkpoint rows whole, top to bottom."""
    shown = []
    for line in lines:
        if line.startswith("[CHECKPOINT"):
            shown.append(line)
        elif line[:1].isdigit():
            shown.append(line.split()[0])
    return shown


def status_line(lines: list[str]) -> str:
    return next(line for line in lines if "publication orders" in line)


async def test_the_screen_shows_catching_up_then_live_messages_and_checkpoint_rows(
    database_url: str, tmp_path: Path
) -> None:
    written_before_subscribing(database_url, 3)
    release = asyncio.Event()
    app = TailApp(held_at_caught_up(events(database_url, interval=3), release), "orders")
    async with app.run_test(size=SCREEN) as pilot:
        lines = await wait_for_screen(pilot, lambda s: len(message_rows(s)) == 3, "the backlog")
        assert status_line(lines).strip().startswith("CATCHING UP")
        transaction_of = transaction_ids(database_url)
        assert [row[:4] for row in message_rows(lines)] == [
            [str(position), str(transaction_of[position]), "TestEvent", "-"]
            for position in (1, 2, 3)
        ]
        assert not rows_starting_with(lines, "[CHECKPOINT")

        release.set()
        await wait_for_screen(pilot, lambda s: status_line(s).strip().startswith("LIVE"), "LIVE")
        append_committed(database_url, "orders", 7)  # positions 4 to 10, one transaction each
        # The status bar is redrawn every STATUS_REFRESH_SECONDS, the rows at once.
        await wait_for_screen(pilot, lambda s: "10 messages" in status_line(s), "10 messages")
        await pilot.pause(0.3)  # a third checkpoint would come now, after the 7th message
        lines = screen_lines(app)
        transaction_of = transaction_ids(database_url)
        # Interval 3: after the 3rd and the 6th live message, none during catch-up.
        assert shown_rows(lines) == [
            *("1", "2", "3", "4", "5", "6"),
            f"[CHECKPOINT tx={transaction_of[6]} pos=6]",
            *("7", "8", "9"),
            f"[CHECKPOINT tx={transaction_of[9]} pos=9]",
            "10",
        ]
        status = status_line(lines)
        assert "10 messages" in status
        assert "2 checkpoints" in status
        assert "rows 12/10,000" in status

        view = app.query_one(RowView)
        checkpoint_y = next(
            y for y in range(view.size.height) if view.render_line(y).text.startswith("[CHECK")
        )
        assert all(
            segment.style and segment.style.dim for segment in view.render_line(checkpoint_y)
        )
        assert not any(segment.style and segment.style.dim for segment in view.render_line(0))

        saved = Path(app.save_screenshot("tail.svg", path=str(tmp_path)))
        assert "CHECKPOINT" in saved.read_text(encoding="utf-8")
        await pilot.press("q")


async def test_the_buffer_keeps_the_newest_rows_checkpoint_rows_included(
    database_url: str,
) -> None:
    written_before_subscribing(database_url, 5)
    app = TailApp(events(database_url, interval=4), "orders", row_limit=8)
    async with app.run_test(size=SCREEN) as pilot:
        await wait_for_screen(pilot, lambda s: status_line(s).strip().startswith("LIVE"), "LIVE")
        append_committed(database_url, "orders", 10)  # positions 6 to 15
        lines = await wait_for_screen(
            pilot, lambda s: "15 messages" in status_line(s), "all 15 messages counted"
        )
        # All rows: 1..9, checkpoint, 10..13, checkpoint, 14, 15: 17 rows, the newest 8 kept.
        transaction_of = transaction_ids(database_url)
        assert shown_rows(lines) == [
            f"[CHECKPOINT tx={transaction_of[9]} pos=9]",
            *("10", "11", "12", "13"),
            f"[CHECKPOINT tx={transaction_of[13]} pos=13]",
            *("14", "15"),
        ]
        assert "rows 8/8" in status_line(lines)
        await pilot.press("q")


async def test_selecting_a_row_shows_the_whole_message(database_url: str) -> None:
    words = " ".join(f"word{n}" for n in range(60))
    with psycopg.connect(database_url) as conn:
        outbox.append(conn, "orders", "OrderPlaced", {"note": words}, partition_key="customer-7")
        outbox.append(conn, "orders", "OrderShipped", {"note": "short"}, message_id="shipped-1")
    app = TailApp(events(database_url), "orders")
    async with app.run_test(size=SCREEN) as pilot:
        lines = await wait_for_screen(pilot, lambda s: len(message_rows(s)) == 2, "two rows")
        first_row = next(line for line in lines if line.startswith("1 "))
        assert "word59" not in first_row  # cut on its row

        await pilot.press("enter")  # nothing selected yet: Enter takes the newest row
        lines = await wait_for_screen(pilot, lambda s: "shipped-1" in "\n".join(s), "details")
        assert "OrderShipped" in "\n".join(lines)

        await pilot.press("escape")
        await wait_for_screen(pilot, lambda s: "shipped-1" not in "\n".join(s), "details closed")

        await pilot.press("up", "enter")
        lines = await wait_for_screen(pilot, lambda s: "word59" in "\n".join(s), "whole data")
        shown = "\n".join(lines)
        assert all(f"word{n}" in shown for n in range(60))
        assert "customer-7" in shown

        await pilot.press("escape")
        await pilot.click(RowView, offset=(1, 1))  # the second row, by mouse
        await wait_for_screen(pilot, lambda s: "shipped-1" in "\n".join(s), "clicked row")
        await pilot.press("q")


def subscription_sessions(url: str) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE datname = current_database() AND application_name LIKE %s",
            ("outbox-poller:subscribe%",),
        ).fetchone()
    assert row is not None
    return int(row[0])


@pytest.mark.parametrize("key", ["q", "ctrl+c"])
async def test_q_or_ctrl_c_exits_and_closes_the_subscription(database_url: str, key: str) -> None:
    append_committed(database_url, "orders", 1)
    app = TailApp(events(database_url), "orders")
    async with app.run_test(size=SCREEN) as pilot:
        await wait_for_screen(pilot, lambda s: status_line(s).strip().startswith("LIVE"), "LIVE")
        assert subscription_sessions(database_url) >= 1
        await pilot.press(key)
        await pilot.pause(0.2)
        assert not app.is_running
    assert app.failure is None
    for _ in range(100):
        if subscription_sessions(database_url) == 0:
            break
        await asyncio.sleep(0.05)
    assert subscription_sessions(database_url) == 0
