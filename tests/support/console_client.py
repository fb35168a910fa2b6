"""The console in-process (Starlette's test client) on a real PostgreSQL, and what its tests do
with it: sign in, open a confirmation and post its form, park messages."""

import html
import re
import time
from typing import Any

import psycopg
from starlette.testclient import TestClient

import outbox
from outbox.positions import Position
from outbox_console.app import create_app
from outbox_console.config import ConsoleConfig
from outbox_console.tokens import OPERATOR, READER, Token

OPERATOR_SECRET = "console-page-token-0123456789"
READER_SECRET = "console-reader-token-0123456789"
# The base URL the test client asks for: a name the console answers to by default.
BASE_URL = "http://127.0.0.1:8400"


def console(url: str, base_url: str = BASE_URL, root_path: str = "", **options: Any) -> TestClient:
    """A console for `url` with an operator (alice) and a reader (bob); `options` go to
    ConsoleConfig."""
    tokens = [Token("alice", OPERATOR_SECRET, OPERATOR), Token("bob", READER_SECRET, READER)]
    config = ConsoleConfig(url, tokens, **{"sample_interval": 60, **options})
    return TestClient(create_app(config), base_url=base_url, root_path=root_path)


def sampled(client: TestClient) -> None:
    """Wait for the console's sampler (started with the client) to read the overview once."""
    sampler = client.app.state.sampler  # type: ignore[attr-defined]
    deadline = time.monotonic() + 30
    while sampler.latest is None:
        assert time.monotonic() < deadline, f"no sample: {sampler.failure}"
        time.sleep(0.02)


def csrf(page: str) -> str:
    found = re.search(r'name="csrf" value="([0-9a-f]+)"', page)
    assert found, page
    return found.group(1)


def sign_in(client: TestClient, secret: str = OPERATOR_SECRET) -> None:
    form = client.get("/sign-in")
    done = client.post(
        "/sign-in", data={"csrf": csrf(form.text), "token": secret}, follow_redirects=False
    )
    assert done.status_code == 303, done.text


def confirmation_form(page: str) -> dict[str, str]:
    """The hidden fields of a confirmation page's form: what posting it sends."""
    form = re.search(r'<form[^>]*id="confirm-form".*?</form>', page, re.S)
    assert form, page
    fields = re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)">', form.group(0))
    return {name: html.unescape(value) for name, value in fields}


def confirm(client: TestClient, query: str) -> tuple[Any, dict[str, str]]:
    """The confirmation page of `query` (action=...&name=...) and its form's fields."""
    shown = client.get(f"/confirm?{query}")
    assert shown.status_code == 200, shown.text
    return shown, confirmation_form(shown.text)


def reason(page: str) -> str:
    found = re.search(r'<p id="reason" role="alert">(.*?)</p>', page, re.S)
    assert found is not None, page
    return html.unescape(found.group(1))


def outcome(page: str) -> str:
    found = re.search(r'<p id="outcome" role="status">(.*?)</p>', page, re.S)
    assert found is not None, page
    return html.unescape(found.group(1))


def consequences(page: str) -> str:
    found = re.search(r'<ul id="consequences">(.*?)</ul>', page, re.S)
    assert found is not None, page
    return html.unescape(re.sub(r"<[^>]+>", " ", found.group(1)))


def append_and_park(
    conn: psycopg.Connection[Any], subscription: str, publication: str, count: int, **data: Any
) -> list[Position]:
    """`count` messages of `publication`, appended in one transaction and parked for
    `subscription` (as a daemon parks them); their places."""
    with conn.transaction():
        positions = outbox.append_many(
            conn, publication, [outbox.NewMessage("T", {"n": n, **data}) for n in range(count)]
        )
    rows = conn.execute(
        "INSERT INTO outbox.parked_messages"
        " (subscription_id, position, transaction_id, attempts, last_error)"
        " SELECT %s, position, transaction_id, 3, 'ValueError: refused'"
        " FROM outbox.messages WHERE position = ANY(%s)"
        " RETURNING transaction_id::text::bigint, position",
        [subscription, positions],
    )
    return sorted(Position(*row) for row in rows)


def parked_positions(url: str, subscription: str) -> set[int]:
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT position FROM outbox.parked_messages WHERE subscription_id = %s",
            [subscription],
        )
        return {row[0] for row in rows}
