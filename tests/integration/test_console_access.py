"""Who may see what on the console, in-process on a real PostgreSQL: the Host names it answers
to (DNS rebinding), messages and blocking sessions' SQL only for a signed-in browser (a
reader's token reads, an operator's also acts), sign-in guesses throttled, and the answers a
missing or malformed name gets."""

import logging
from collections.abc import Iterator

import psycopg
import pytest

import outbox
from outbox.positions import Position
from outbox_console.hosts import allowed_hosts
from poller import operations
from tests.support.console_client import (
    READER_SECRET,
    append_and_park,
    console,
    csrf,
    parked_positions,
    reason,
    sampled,
    sign_in,
)
from tests.support.databases import DatabaseFactory

SECRET_DATA = "s3cret-data"


@pytest.fixture
def parked(database_url: str) -> Position:
    """Subscription billing of orders, with one message parked."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        operations.create(conn, "billing", "orders", "start", {})
        return append_and_park(conn, "billing", "orders", 1, secret=SECRET_DATA)[0]


# A page's own name pointed at 127.0.0.1 (DNS rebinding) is among those refused.
HOSTS = {
    "127.0.0.1:8400": True,
    "localhost:8400": True,
    "[::1]:8400": True,
    "console.example": True,  # named with --allowed-host
    "attacker.example": False,
    "127.0.0.1.attacker.example": False,
    "": False,
}


@pytest.mark.usefixtures("parked")
def test_the_console_answers_only_to_the_names_it_was_given(database_url: str) -> None:
    hosts = allowed_hosts("127.0.0.1", ["console.example"])
    with console(database_url, allowed_hosts=hosts) as client:
        sign_in(client)
        shown = {host: client.get("/parked?name=billing", headers={"host": host}) for host in HOSTS}
    for host, answered in HOSTS.items():
        assert shown[host].status_code == (200 if answered else 400), host
        assert ("ValueError: refused" in shown[host].text) == answered, host
        if not answered:
            assert f"does not answer to the host {host!r}" in shown[host].text


def test_messages_are_shown_only_to_a_browser_a_token_signed_in(
    database_url: str, parked: Position
) -> None:
    pages: tuple[str, ...] = ("/parked?name=billing", f"/parked/message?name=billing&at={parked}")
    pages += ("/tail?publication=orders", "/tail/live?publication=orders")
    with console(database_url) as client:
        for path in pages:
            anonymous = client.get(path)
            assert anonymous.status_code == 403, path
            assert SECRET_DATA not in anonymous.text, path
            assert "ValueError" not in anonymous.text, path
            assert "Sign in to read messages" in anonymous.text, path
        sign_in(client, READER_SECRET)
        read = {path: client.get(path) for path in pages}
        confirmation = client.get(f"/confirm?action=purge&name=billing&at={parked}")
        refused = client.post(
            "/act",
            data={"csrf": csrf(confirmation.text), "action": "purge", "name": "billing"},
        )
    for path in pages:
        assert read[path].status_code == 200, path
    assert SECRET_DATA in read[f"/parked/message?name=billing&at={parked}"].text
    assert SECRET_DATA in read["/tail/live?publication=orders"].text
    assert "signed in with a reader's token" in confirmation.text
    assert 'id="confirm-button"' not in confirmation.text
    assert refused.status_code == 403
    assert "bob signed in with a reader's token: actions need an operator's" in reason(refused.text)
    assert parked_positions(database_url, "billing") == {parked.position}


@pytest.fixture
def blocked(database_url: str, database_factory: DatabaseFactory) -> Iterator[None]:
    """Subscription billing, held back by a transaction open in its own database and one in
    another database of the server."""
    other_url = database_factory.create(migrated=False)
    with (
        psycopg.connect(database_url) as same,
        psycopg.connect(other_url) as other,
        psycopg.connect(database_url, autocommit=True) as conn,
    ):
        operations.create(conn, "billing", "orders", "start", {})
        other.execute("SELECT txid_current(), 'other-database-sql'")
        same.execute("SELECT txid_current(), 'same-database-sql'")
        outbox.append(conn, "orders", "T", {})
        yield
    database_factory.drop(other_url)


@pytest.mark.usefixtures("blocked")
def test_a_blocking_sessions_sql_shows_only_when_signed_in_and_only_from_this_database(
    database_url: str,
) -> None:
    with console(database_url) as client:
        sampled(client)
        anonymous = client.get("/live").text
        assert anonymous.count("open ") == 2, "both sessions are named"
        assert "same-database-sql" not in anonymous
        assert "other-database-sql" not in anonymous
        sign_in(client, READER_SECRET)
        signed_in = client.get("/live").text
    assert "same-database-sql" in signed_in
    assert "other-database-sql" not in signed_in
    assert "in database outbox_test_" in signed_in, "the other session says where it is"


@pytest.mark.usefixtures("parked")
def test_wrong_tokens_from_one_address_stop_being_compared(database_url: str) -> None:
    with console(database_url) as client:
        form = client.get("/sign-in")
        answers = [
            client.post(
                "/sign-in",
                data={"csrf": csrf(form.text), "token": f"wrong-token-{n:04}-0123456789"},
                follow_redirects=False,
            ).status_code
            for n in range(5)
        ]
        right = client.post(
            "/sign-in",
            data={"csrf": csrf(form.text), "token": READER_SECRET},
            follow_redirects=False,
        )
    assert answers == [403] * 5
    assert right.status_code == 429, "even the right token waits"
    assert "too many wrong tokens from testclient: try again in" in reason(right.text)
    assert 0 < int(right.headers["retry-after"]) <= 60


def test_the_session_cookie_is_for_the_whole_console_whichever_page_set_it(
    database_url: str,
) -> None:
    with console(database_url) as client:
        first = client.get("/static/console.css")
    cookie = first.headers["set-cookie"]
    assert "; Path=/;" in cookie, cookie


MISSING = (
    "/subscription?name=nobody",
    "/parked?name=nobody",
    "/parked/message?name=billing&at=1:999999",
    "/confirm?action=seek&name=nobody&to=start",
)
WITH_NUL = (
    "/subscription?name=bill%00ing",
    "/parked?name=bill%00ing",
    "/parked/message?name=bill%00ing&at=1",
    "/tail?publication=ord%00ers",
    "/tail/live?publication=ord%00ers",
    "/confirm?action=skip&name=bill%00ing&to=end",
)


@pytest.mark.usefixtures("parked")
def test_a_missing_name_is_not_found_and_a_nul_in_one_is_a_bad_value(
    database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="outbox_console")
    with console(database_url) as client:
        sign_in(client)
        missing = {path: client.get(path) for path in MISSING}
        with_nul = {path: client.get(path) for path in WITH_NUL}
    for path, shown in missing.items():
        assert shown.status_code == 404, path
        assert "does not exist" in shown.text or "has no parked message" in shown.text, path
    for path, shown in with_nul.items():
        assert shown.status_code == 400, path
        assert "holds a NUL character, which no name can" in reason(shown.text), path
    assert [r.getMessage() for r in caplog.records if r.name.startswith("outbox_console")] == []
