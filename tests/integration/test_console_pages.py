"""The console's pages in-process (Starlette's test client) on a real PostgreSQL: what a role
that may not act or read sees, refusals that change nothing, the path prefix behind a proxy,
and the delivery rate the sampler measures."""

import asyncio
import re
import threading
import time
from typing import Any

import psycopg
import pytest

import outbox
from outbox.positions import Position
from outbox_console.history import History
from outbox_console.sampler import Sampler
from poller import operations
from poller.daemon.options import DaemonOptions
from poller.retention import retention_pass
from tests.support.cli import outbox_command
from tests.support.console_client import (
    append_and_park,
    confirm,
    console,
    csrf,
    reason,
    sampled,
    sign_in,
)
from tests.support.databases import server_address, through_port
from tests.support.partitions import billing_over_three_partitions, move_checkpoint
from tests.support.role_logins import login_as
from tests.support.tcp_proxy import TcpProxy

SECRET_DATA = "s3cret-data"
SECRET_ERROR = "s3cret-error"


def act(client: Any, **fields: str) -> Any:
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


def wait_for(condition: Any, what: str, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"no {what} in {seconds} s"
        time.sleep(0.02)


def test_as_the_reader_role_the_console_shows_no_message_and_offers_no_action(
    database_url: str, parked: Position
) -> None:
    with login_as(database_url, "outbox_reader") as reader_url, console(reader_url) as client:
        sampled(client)
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
    """Confirmed before retention retired the place, and taken after: the seek is refused,
    on the confirmation drawn again as when it is posted, in the command line's words."""
    with billing_over_three_partitions(database_url, 100) as conn, console(database_url) as client:
        row = conn.execute(
            "SELECT transaction_id::text::bigint, position FROM outbox.messages WHERE position = 5"
        ).fetchone()
        assert row is not None
        retired = str(Position(*row))
        move_checkpoint(conn, "billing", 150)
        sign_in(client)
        _, form = confirm(client, f"action=seek&name=billing&to={retired}")
        options = DaemonOptions(retention_minimum_age=0.001, partition_size=100)
        assert any(r.outcome == "retired" for r in retention_pass(conn, options).retired)
        before = operations.get(conn, "billing").checkpoint
        typed = outbox_command(["seek", "billing", "--to", retired], database_url)
        preview = client.get(f"/confirm?action=seek&name=billing&to={retired}")
        taken = client.post("/act", data=form)
    assert typed.returncode == 1
    for page in (preview, taken):
        assert page.status_code == 409
        assert reason(page.text) in typed.stderr
        assert "were retired by retention" in reason(page.text)
    with psycopg.connect(database_url) as conn:
        assert operations.get(conn, "billing").checkpoint == before


@pytest.mark.usefixtures("parked")
def test_links_and_the_session_cookie_keep_to_the_proxys_path_prefix(database_url: str) -> None:
    proxied = console(
        database_url,
        root_path="/outbox",
        base_url="https://console.example",
        allowed_hosts=frozenset({"console.example"}),
    )
    with proxied as client:
        sampled(client)
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


def test_the_parked_list_is_paged_and_its_actions_count_every_parked_message(
    database_url: str,
) -> None:
    with psycopg.connect(database_url, autocommit=True) as conn:
        operations.create(conn, "billing", "orders", "start", {})
        parked = append_and_park(conn, "billing", "orders", 1050)
    with console(database_url) as client:
        sign_in(client)
        pages = [client.get("/parked?name=billing")]
        while found := re.search(r'href="([^"]+)" id="next-page"', pages[-1].text):
            pages.append(client.get(found.group(1).replace("&amp;", "&")))
    listed = [
        int(position)
        for shown in pages
        for position in re.findall(r'<th scope="row"><a href="[^"]+">\d+:(\d+)</a>', shown.text)
    ]
    assert listed == [at.position for at in parked], "every one, once, in delivery order"
    assert len(pages) == 11
    for shown in pages:
        assert "1050 parked messages" in shown.text
        assert "Replay all 1050 parked messages" in shown.text
        assert "Purge all 1050 parked messages" in shown.text


def test_a_page_reads_only_as_much_of_a_message_as_it_shows(database_url: str) -> None:
    big = "x" * 1_000_000  # near the writer's limit (OUTBOX_MAX_PAYLOAD_BYTES)
    with psycopg.connect(database_url, autocommit=True) as conn:
        operations.create(conn, "billing", "orders", "start", {})
        with conn.transaction():
            outbox.append_many(
                conn, "orders", [outbox.NewMessage("T", {"blob": "y" * 100_000}) for _ in range(20)]
            )
        at = append_and_park(conn, "billing", "orders", 1, blob=big)[0]
    with (
        TcpProxy(server_address(database_url)) as proxy,
        console(through_port(database_url, proxy.port)) as client,
    ):
        sign_in(client)
        before = proxy.bytes_to_clients
        tail = client.get("/tail/live?publication=orders")
        tail_read = proxy.bytes_to_clients - before
        before = proxy.bytes_to_clients
        shown = client.get(f"/parked/message?name=billing&at={at}")
        page_read = proxy.bytes_to_clients - before
    assert tail.status_code == shown.status_code == 200
    assert tail_read < 100_000, f"the tail read {tail_read} bytes to show 21 x 200 characters"
    assert page_read < 300_000, f"the page read {page_read} bytes of a 1 MB message"
    assert len(shown.text) < 300_000
    assert "The first 65,536 of 1,000,0" in shown.text, "it says the payload is cut"


def test_a_database_that_stops_answering_leaves_no_page_hanging_nor_old_figures_unsaid(
    database_url: str,
) -> None:
    with psycopg.connect(database_url, autocommit=True) as conn:
        operations.create(conn, "billing", "orders", "start", {})
    with (
        TcpProxy(server_address(database_url)) as proxy,
        console(through_port(database_url, proxy.port), sample_interval=0.2) as client,
    ):
        try:
            sampled(client)
            proxy.blackhole()
            wait_for(lambda: 'id="stale"' in client.get("/live").text, "age said", 15)
            answers: list[Any] = []
            asking = threading.Thread(
                target=lambda: answers.append(client.get("/subscription?name=billing")),
                daemon=True,
            )
            started = time.monotonic()
            asking.start()
            asking.join(timeout=20)
            assert answers, "the page still hangs after 20 s"
            assert answers[0].status_code == 503
            assert "database error" in reason(answers[0].text)
            assert time.monotonic() - started < 10
            overview = client.get("/")
            assert "These figures are" in overview.text
            assert "s old: the database has not answered the console since" in overview.text
        finally:
            # The sampler's query waits for an answer the blackhole never gives: it fails once
            # its connection is cut, so the console can stop.
            proxy.refuse()


async def test_a_failed_sample_is_tried_again_under_the_reconnect_backoff_not_the_interval(
    database_url: str,
) -> None:
    """Sampled every 30 s, the overview said the database was unreachable for up to 30 s
    after it came back; it is tried again after the reconnect policy's backoff (at most 5 s)."""
    with TcpProxy(server_address(database_url)) as proxy:
        sampler = Sampler(through_port(database_url, proxy.port), 30, History(3600, 30))
        stop = asyncio.Event()
        proxy.refuse()
        running = asyncio.create_task(sampler.run(stop))
        try:
            while sampler.failure is None:
                await asyncio.sleep(0.01)
            proxy.accept()
            async with asyncio.timeout(10):
                while sampler.failure is not None:
                    await asyncio.sleep(0.01)
            assert sampler.latest is not None
        finally:
            stop.set()
            await running
