"""The console's pages in-process (Starlette's test client) on a real PostgreSQL: what a role
that may not act or read sees, refusals that change nothing, the path prefix behind a proxy,
and the delivery rate the sampler measures."""

import re
from typing import Any

import psycopg
import pytest
from starlette.testclient import TestClient

import outbox
from outbox.positions import Position
from outbox_console.app import create_app
from outbox_console.config import ConsoleConfig
from outbox_console.history import History
from outbox_console.sampler import Sampler
from outbox_console.tokens import Token
from poller import operations
from poller.daemon.options import DaemonOptions
from poller.daemon.process.retention import retention_pass
from tests.support.cli import outbox_command
from tests.support.partitions import billing_over_three_partitions, move_checkpoint
from tests.support.role_logins import login_as

SECRET = "console-page-token-0123456789"
SECRET_DATA = "s3cret-data"
SECRET_ERROR = "s3cret-error"


def console(url: str, **options: Any) -> TestClient:
    config = ConsoleConfig(url, [Token("alice", SECRET)], sample_interval=60)
    return TestClient(create_app(config), **options)


def csrf(page: str) -> str:
    found = re.search(r'name="csrf" value="([0-9a-f]+)"', page)
    assert found, page
    return found.group(1)


def sign_in(client: TestClient) -> None:
    form = client.get("/sign-in")
    done = client.post(
        "/sign-in", data={"csrf": csrf(form.text), "token": SECRET}, follow_redirects=False
    )
    assert done.status_code == 303, done.text


def act(client: TestClient, **fields: str) -> Any:
    return client.post("/act", data={"csrf": csrf(client.get("/").text), **fields})


@pytest.fixture
def parked(database_url: str) -> Position:
    """Subscription billing of orders, with one message parked."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        operations.create(conn, "billing", "orders", "start", {})
        position = outbox.append(conn, "orders", "Secret", {"value": SECRET_DATA})
        row = conn.execute(
            "INSERT INTO outbox.parked_messages"
            " (subscription_id, position, transaction_id, attempts, last_error)"
            " SELECT 'billing', position, transaction_id, 3, %s FROM outbox.messages"
            " WHERE position = %s RETURNING transaction_id::text::bigint",
            [f"ValueError: {SECRET_ERROR}", position],
        ).fetchone()
        assert row is not None
    return Position(row[0], position)


def parked_count(url: str) -> int:
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT count(*) FROM outbox.parked_messages").fetchone()
    assert row is not None
    return int(row[0])


def test_as_the_reader_role_the_console_shows_no_message_and_offers_no_action(
    database_url: str, parked: Position
) -> None:
    with login_as(database_url, "outbox_reader") as reader_url, console(reader_url) as client:
        client.app.state.sampler.sample()  # type: ignore[attr-defined]
        sign_in(client)  # even with a token
        pages = {
            path: client.get(path)
            for path in (
                "/",
                "/live",
                "/subscription?name=billing",
                "/parked?name=billing",
                f"/parked/message?name=billing&at={parked}",
                "/tail?publication=orders",
                f"/confirm?action=purge&name=billing&at={parked}",
            )
        }
        refused = act(client, action="purge", name="billing", at=str(parked))
    for path, shown in pages.items():
        assert SECRET_DATA not in shown.text, path
        assert SECRET_ERROR not in shown.text, path
        assert 'action="/confirm"' not in shown.text, f"{path} offers an action"
        assert 'id="confirm-button"' not in shown.text, path
    assert "it may not read messages, so none are shown" in pages["/"].text
    assert "billing" in pages["/"].text, "the overview still shows where it stands"
    assert "/tail?" not in pages["/"].text
    assert "no action is offered" in pages["/subscription?name=billing"].text
    assert "which may not read messages" in pages["/parked?name=billing"].text
    for path in ("/tail?publication=orders", f"/parked/message?name=billing&at={parked}"):
        assert pages[path].status_code == 403
    assert pages[f"/confirm?action=purge&name=billing&at={parked}"].status_code == 403
    assert refused.status_code == 403
    assert "may not change subscriptions" in refused.text
    assert parked_count(database_url) == 1


def test_as_the_poller_role_messages_show_but_no_action_is_offered_or_taken(
    database_url: str, parked: Position
) -> None:
    with login_as(database_url, "outbox_poller") as poller_url, console(poller_url) as client:
        sign_in(client)
        shown = client.get(f"/parked/message?name=billing&at={parked}")
        subscription = client.get("/subscription?name=billing")
        refused = act(client, action="purge", name="billing", at=str(parked))
    assert SECRET_DATA in shown.text
    assert 'action="/confirm"' not in shown.text + subscription.text
    assert refused.status_code == 403
    assert parked_count(database_url) == 1


def test_a_seek_to_a_retired_position_is_refused_on_the_page_as_on_the_command_line(
    database_url: str,
) -> None:
    with billing_over_three_partitions(database_url, 100) as conn:
        row = conn.execute(
            "SELECT transaction_id::text::bigint, position FROM outbox.messages WHERE position = 5"
        ).fetchone()
        assert row is not None
        retired = str(Position(*row))
        move_checkpoint(conn, "billing", 150)
        options = DaemonOptions(retention_minimum_age=0.001, partition_size=100)
        assert any(r.outcome == "retired" for r in retention_pass(conn, options).retired)
        before = operations.get(conn, "billing").checkpoint
    typed = outbox_command(["seek", "billing", "--to", retired], database_url)
    assert typed.returncode == 1
    with console(database_url) as client:
        preview = client.get(f"/confirm?action=seek&name=billing&to={retired}")
        sign_in(client)
        taken = act(client, action="seek", name="billing", to=retired)
    for page in (preview, taken):
        assert page.status_code == 409
        reason = re.search(r'<p id="reason" role="alert">(.*?)</p>', page.text, re.S)
        assert reason is not None
        assert reason.group(1).replace("&#39;", "'") in typed.stderr
        assert "were retired by retention" in reason.group(1)
    with psycopg.connect(database_url) as conn:
        assert operations.get(conn, "billing").checkpoint == before


@pytest.mark.usefixtures("parked")
def test_links_and_the_session_cookie_keep_to_the_proxys_path_prefix(database_url: str) -> None:
    with console(database_url, root_path="/outbox", base_url="https://console.example") as client:
        client.app.state.sampler.sample()  # type: ignore[attr-defined]
        overview = client.get("/")
    assert 'href="/outbox/subscription?name=billing"' in overview.text
    assert 'src="/outbox/static/console.js"' in overview.text
    cookie = overview.headers["set-cookie"]
    assert "Path=/outbox" in cookie
    assert all(flag in cookie for flag in ("HttpOnly", "SameSite=Strict", "Secure"))
    assert "frame-ancestors 'none'" in overview.headers["content-security-policy"]


def test_the_delivery_rate_is_what_the_checkpoints_passed_between_two_samples(
    database_url: str,
) -> None:
    with psycopg.connect(database_url, autocommit=True) as conn:
        operations.create(conn, "billing", "orders", "start", {}, shards=2)
        with conn.transaction():
            outbox.append_many(
                conn,
                "orders",
                [outbox.NewMessage("T", {}, partition_key=f"k{n}") for n in range(30)],
            )
        now = [1000.0]
        sampler = Sampler(database_url, 1, History(3600, 1), clock=lambda: now[0])
        try:
            assert sampler.sample().rates == {"billing": None}
            row = conn.execute("SELECT max(transaction_id)::text FROM outbox.messages").fetchone()
            assert row is not None
            end = str(Position(int(row[0]), 2**63 - 1))
            operations.seek(conn, "billing", end)
            now[0] += 2
            assert sampler.sample().rates == {"billing": 15.0}  # 30 messages in 2 s
            now[0] += 2
            assert sampler.sample().rates == {"billing": 0.0}
        finally:
            sampler.close()
