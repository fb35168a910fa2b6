"""The console's actions do what their confirmation said, once: a purge or replay of "all"
touches only the parked messages the page counted, a seek whose counts changed since the page
was drawn is shown again rather than taken, a skip says what it counted when it was asked for,
and a confirmation's form acts once however often (or however many at a time) it is posted."""

import threading
from typing import Any

import psycopg
import pytest

import outbox
from outbox.positions import Position
from poller import operations
from tests.support.console_client import (
    append_and_park,
    confirm,
    confirmation_form,
    consequences,
    console,
    csrf,
    outcome,
    parked_positions,
    reason,
    sign_in,
)


@pytest.fixture
def conn(database_url: str) -> Any:
    with psycopg.connect(database_url, autocommit=True) as connection:
        operations.create(connection, "billing", "orders", "start", {})
        yield connection


def park_below(conn: psycopg.Connection[Any], subscription: str, at: Position) -> None:
    """Park the message at `at` now: a shard behind the others parks a message that sorts
    before those parked already."""
    conn.execute(
        "INSERT INTO outbox.parked_messages"
        " (subscription_id, position, transaction_id, attempts, last_error)"
        " VALUES (%s, %s, %s::text::xid8, 1, 'failed')",
        [subscription, at.position, str(at.transaction_id)],
    )


def test_purge_all_acts_only_on_the_messages_its_page_counted(
    database_url: str, conn: psycopg.Connection[Any]
) -> None:
    with conn.transaction():
        early = outbox.append(conn, "orders", "T", {"n": "early"})  # sorts before the parked
    append_and_park(conn, "billing", "orders", 8)
    with console(database_url) as client:
        sign_in(client)
        page, form = confirm(client, "action=purge&name=billing")
        assert "8 messages will be dropped" in consequences(page.text)
        later = append_and_park(conn, "billing", "orders", 5)  # parked after the page was drawn
        done = client.post("/act", data=form)
        assert done.status_code == 200, done.text
        assert outcome(done.text).startswith("billing: purged 8 messages")
        assert parked_positions(database_url, "billing") == {at.position for at in later}

        # One parked since that sorts among those shown: the set changed, nothing is purged,
        # and the page is drawn again with what it would purge now.
        page, form = confirm(client, "action=purge&name=billing")
        assert "5 messages will be dropped" in consequences(page.text)
        row = conn.execute(
            "SELECT transaction_id::text::bigint FROM outbox.messages WHERE position = %s",
            [early],
        ).fetchone()
        assert row is not None
        park_below(conn, "billing", Position(row[0], early))
        again = client.post("/act", data=form)
        assert again.status_code == 409, again.text
        assert "has changed since the page you confirmed was drawn" in again.text
        assert "6 messages will be dropped" in consequences(again.text)
        assert len(parked_positions(database_url, "billing")) == 6


def test_a_replay_of_all_marks_only_what_its_page_counted(
    database_url: str, conn: psycopg.Connection[Any]
) -> None:
    shown = append_and_park(conn, "billing", "orders", 3)
    with console(database_url) as client:
        sign_in(client)
        _, form = confirm(client, "action=replay&name=billing")
        later = append_and_park(conn, "billing", "orders", 2)
        done = client.post("/act", data=form)
    assert outcome(done.text).startswith("billing: replay of 3 messages requested")
    marked = conn.execute(
        "SELECT position FROM outbox.parked_messages"
        " WHERE subscription_id = 'billing' AND replay_requested_at IS NOT NULL"
    )
    assert {row[0] for row in marked} == {at.position for at in shown}
    assert later[0].position not in {at.position for at in shown}


def test_a_confirmations_form_acts_once(database_url: str, conn: psycopg.Connection[Any]) -> None:
    append_and_park(conn, "billing", "orders", 2)
    with console(database_url) as client:
        sign_in(client)
        _, form = confirm(client, "action=purge&name=billing")
        assert client.post("/act", data=form).status_code == 200
        later = append_and_park(conn, "billing", "orders", 1)
        again = client.post("/act", data=form)  # a reload, the back button, a double click
    assert again.status_code == 409
    assert "open the action again" in reason(again.text)
    assert parked_positions(database_url, "billing") == {later[0].position}


def test_the_same_form_posted_at_once_from_many_threads_acts_once(
    database_url: str, conn: psycopg.Connection[Any]
) -> None:
    append_and_park(conn, "billing", "orders", 1)
    with console(database_url) as client:
        sign_in(client)
        _, form = confirm(client, "action=replay&name=billing")
        start = threading.Barrier(8)
        answers: list[int] = []

        def post() -> None:
            start.wait()
            answers.append(client.post("/act", data=form).status_code)

        posters = [threading.Thread(target=post) for _ in range(8)]
        for poster in posters:
            poster.start()
        for poster in posters:
            poster.join(timeout=30)
    assert sorted(answers) == [200] + [409] * 7
    row = conn.execute("SELECT replay_requests FROM outbox.subscriptions").fetchone()
    assert row == (1,), "one replay was requested"


def test_a_seek_whose_counts_changed_since_its_page_is_shown_again_not_taken(
    database_url: str, conn: psycopg.Connection[Any]
) -> None:
    with conn.transaction():
        positions = outbox.append_many(
            conn, "orders", [outbox.NewMessage("T", {"n": n}) for n in range(21)]
        )
    first = conn.execute(
        "SELECT transaction_id::text::bigint FROM outbox.messages WHERE position = %s",
        [positions[0]],
    ).fetchone()
    assert first is not None
    at = Position(first[0], positions[0])
    operations.seek(conn, "billing", str(at))
    epoch = operations.get(conn, "billing").epoch
    with console(database_url) as client:
        sign_in(client)
        page, form = confirm(client, f"action=seek&name=billing&to={at}")
        assert "0 messages will be delivered again" in consequences(page.text)
        # The daemon delivers the other 20 and stores its checkpoint meanwhile.
        conn.execute(
            "UPDATE outbox.subscriptions SET last_processed_position = %s", [positions[-1]]
        )
        refused = client.post("/act", data=form)
        assert refused.status_code == 409, refused.text
        assert "20 messages will be delivered again" in consequences(refused.text)
        assert operations.get(conn, "billing").epoch == epoch, "nothing was changed"

        taken = client.post("/act", data=confirmation_form(refused.text))
    assert taken.status_code == 200, taken.text
    assert "20 messages to deliver again" in outcome(taken.text)
    record = operations.get(conn, "billing")
    assert (record.checkpoint, record.epoch) == (at, epoch + 1)


def test_a_skip_says_what_it_counted_when_asked_for_and_refuses_a_new_epoch(
    database_url: str, conn: psycopg.Connection[Any]
) -> None:
    with conn.transaction():
        positions = outbox.append_many(
            conn, "orders", [outbox.NewMessage("T", {"n": n}) for n in range(10)]
        )
    with console(database_url) as client:
        sign_in(client)
        page, form = confirm(client, "action=skip&name=billing&to=end")
        assert "10 messages after the" in consequences(page.text)
        # A leader delivers four before the operator confirms: the skip finishes six at most.
        row = conn.execute(
            "SELECT transaction_id::text FROM outbox.messages WHERE position = %s",
            [positions[3]],
        ).fetchone()
        assert row is not None
        conn.execute(
            "UPDATE outbox.subscriptions SET last_processed_transaction_id = %s::xid8,"
            " last_processed_position = %s",
            [row[0], positions[3]],
        )
        done = client.post("/act", data=form)
        assert done.status_code == 200, done.text
        assert "at most 6 messages after the stored checkpoint" in outcome(done.text)

        _, form = confirm(client, f"action=skip&name=billing&to={_place(conn, positions[5])}")
        operations.seek(conn, "billing", "start")  # a new epoch: the skip would finish more
        refused = client.post("/act", data=form)
    assert refused.status_code == 409, refused.text
    assert "At most 6 messages after the stored checkpoint" in consequences(refused.text)


def _place(conn: psycopg.Connection[Any], position: int) -> Position:
    row = conn.execute(
        "SELECT transaction_id::text::bigint FROM outbox.messages WHERE position = %s",
        [position],
    ).fetchone()
    assert row is not None
    return Position(row[0], position)


def test_a_post_without_a_confirmation_behind_it_changes_nothing(
    database_url: str, conn: psycopg.Connection[Any]
) -> None:
    parked = append_and_park(conn, "billing", "orders", 1)
    with console(database_url) as client:
        sign_in(client)
        forged = client.post(
            "/act",
            data={"csrf": csrf(client.get("/").text), "action": "purge", "name": "billing"},
        )
    assert forged.status_code == 409
    assert parked_positions(database_url, "billing") == {parked[0].position}
