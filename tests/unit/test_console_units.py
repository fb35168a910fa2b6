"""The console's pure parts: tokens, sessions and CSRF tokens, charts and the history."""

from pathlib import Path

import pytest

from outbox.positions import Position
from outbox_console import action_pages
from outbox_console.charts import HEIGHT, WIDTH, line_chart
from outbox_console.confirmations import Confirmations
from outbox_console.history import History, Point, ShardPlace, passed_between
from outbox_console.hosts import allowed_hosts, host_name, is_loopback
from outbox_console.reading_pages import span_text
from outbox_console.sessions import Sessions, SignedIn
from outbox_console.throttle import MAX_FAILURES, WINDOW_SECONDS, SignInThrottle
from outbox_console.tokens import (
    OPERATOR,
    READER,
    Token,
    TokenError,
    configured_tokens,
    parse_token_lines,
    token_holder,
)
from poller.membership import ShardUnit

SECRET = "a" * 16


def test_a_token_file_names_its_tokens_and_their_roles_and_skips_comments() -> None:
    text = (
        f"# operators\n\nalice: {SECRET}\n  {'b' * 20}  \nreader bob: {'c' * 16}\n"
        f"operator carol smith: {'d' * 16}\nreader: {'e' * 16}\n"
    )
    assert parse_token_lines(text, "file") == [
        Token("alice", SECRET, OPERATOR),
        Token("token", "b" * 20, OPERATOR),
        Token("bob", "c" * 16, READER),
        Token("carol smith", "d" * 16, OPERATOR),
        Token("reader", "e" * 16, OPERATOR),  # a name alone is an operator's
    ]


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ("alice: short", "at least 16 characters"),
        (f": {SECRET}", "a name before ':' must not be empty"),
        ("alice: " + "é" * 20, "printable ASCII"),
    ],
)
def test_a_bad_token_line_is_refused_naming_the_line_and_not_the_secret(
    line: str, reason: str
) -> None:
    with pytest.raises(TokenError, match=reason) as refused:
        parse_token_lines(f"# first\n{line}\n", "tokens.txt")
    assert "tokens.txt line 2" in str(refused.value)
    assert line.partition(":")[2].strip() not in str(refused.value)


def test_the_variables_and_the_file_all_give_tokens(tmp_path: Path) -> None:
    file = tmp_path / "tokens"
    file.write_text(f"bob: {'c' * 16}\n")
    assert configured_tokens(SECRET, file, "r" * 16) == [
        Token("token", SECRET, OPERATOR),
        Token("reader", "r" * 16, READER),
        Token("bob", "c" * 16, OPERATOR),
    ]
    assert configured_tokens(None, None) == []
    with pytest.raises(TokenError, match="OUTBOX_CONSOLE_TOKEN: a token must be at least"):
        configured_tokens("short", None)
    with pytest.raises(TokenError, match="OUTBOX_CONSOLE_READER_TOKEN: a token must be at"):
        configured_tokens(None, None, "short")


def test_an_offered_token_names_its_holder_and_nothing_else_does() -> None:
    tokens = [Token("alice", SECRET), Token("bob", "b" * 16, READER)]
    assert token_holder(tokens, "b" * 16) == Token("bob", "b" * 16, READER)
    assert token_holder(tokens, SECRET) == Token("alice", SECRET, OPERATOR)
    for wrong in ("", SECRET[:-1], SECRET + "a", "\udcff" * 16):
        assert token_holder(tokens, wrong) is None
    assert token_holder([], SECRET) is None


def test_a_csrf_token_is_worth_something_only_for_its_own_session() -> None:
    sessions = Sessions()
    first, second = sessions.sign_in("alice", OPERATOR), sessions.sign_in("bob", READER)
    assert sessions.csrf_valid(first, sessions.csrf_token(first))
    assert not sessions.csrf_valid(second, sessions.csrf_token(first))
    assert not sessions.csrf_valid(first, None)
    assert not sessions.csrf_valid(None, sessions.csrf_token(first))
    # Another process (a restart) makes other tokens for the same session id.
    assert not Sessions().csrf_valid(first, sessions.csrf_token(first))


def test_a_session_ends_when_idle_too_long_or_signed_out() -> None:
    now = [0.0]
    sessions = Sessions(idle_seconds=10, clock=lambda: now[0])
    session = sessions.sign_in("alice", READER)
    now[0] = 9
    assert sessions.signed_in(session) == SignedIn("alice", READER)
    now[0] = 18  # 9 s after it was last seen
    assert sessions.signed_in(session) == SignedIn("alice", READER)
    now[0] = 29
    assert sessions.signed_in(session) is None
    again = sessions.sign_in("alice", OPERATOR)
    sessions.sign_out(again)
    assert sessions.signed_in(again) is None
    assert sessions.signed_in("never-signed-in") is None


def test_a_chart_spans_its_box_from_zero_to_the_largest_value() -> None:
    chart = line_chart([(0, 0), (5, None), (10, 50), (20, 100)], start=0, end=20)
    assert chart.points == f"0.0,{HEIGHT:.1f} {WIDTH / 2:.1f},{HEIGHT / 2:.1f} {WIDTH:.1f},0.0"
    assert (chart.top, chart.latest) == (100, 100)
    empty = line_chart([(1, None)], start=0, end=20)
    assert (empty.points, empty.latest, empty.top) == ("", None, 1.0)


def test_the_history_keeps_its_span_and_forgets_deleted_subscriptions() -> None:
    history = History(keep_seconds=10, interval=1)
    for at in range(30):
        history.add("billing", Point(at, at, None))
    history.add("gone", Point(29, 1, None))
    assert [p.at for p in history.points("billing", now=29)] == list(range(19, 30))
    history.keep_only(["billing"])
    assert history.points("gone", now=29) == []


def test_only_checkpoints_that_moved_forward_count_as_delivered() -> None:
    one, two = ShardPlace("billing", ShardUnit(2, 0)), ShardPlace("billing", ShardUnit(2, 1))
    new = ShardPlace("billing", ShardUnit(4, 0))
    before = {one: Position(5, 1), two: Position(5, 9)}
    after = {one: Position(6, 1), two: Position(5, 2), new: Position(7, 1)}  # two sought back
    assert passed_between(before, after) == [(one, Position(5, 1), Position(6, 1))]


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(5, "the last minute"), (600, "the last 10 minutes"), (3600, "the last hour")],
)
def test_a_chart_says_the_span_it_shows(seconds: float, text: str) -> None:
    assert span_text(seconds) == text


@pytest.mark.parametrize(
    ("offered", "kept"),
    [
        ("/subscription?name=billing", "/subscription?name=billing"),
        ("//evil.example/", None),
        ("https://evil.example/", None),
        ("/\\evil.example", None),
        ("subscription", None),
        (None, None),
    ],
)
def test_signing_in_goes_back_only_to_a_page_of_the_console(
    offered: str | None, kept: str | None
) -> None:
    assert action_pages.safe_next(offered) == kept


def test_a_confirmation_is_taken_once_by_its_own_session_while_it_is_fresh() -> None:
    now = [0.0]
    confirmations = Confirmations[str](lifetime=60, clock=lambda: now[0])
    kept = confirmations.keep("session-a", "purge 3")
    assert confirmations.take("session-b", kept) is None, "another session's"
    assert confirmations.shown("session-a", kept) == "purge 3"
    assert confirmations.take("session-a", kept) == "purge 3"
    assert confirmations.take("session-a", kept) is None, "taken once"
    stale = confirmations.keep("session-a", "seek")
    now[0] = 61
    assert confirmations.take("session-a", stale) is None, "too old"
    assert confirmations.take("session-a", None) is None


def test_wrong_tokens_stop_an_address_for_the_window_and_no_other() -> None:
    now = [0.0]
    throttle = SignInThrottle(clock=lambda: now[0])
    stopped = [throttle.failed("10.0.0.1") for _ in range(MAX_FAILURES)]
    assert stopped == [False] * (MAX_FAILURES - 1) + [True], "the last one stops it, once"
    assert throttle.wait_seconds("10.0.0.1") == WINDOW_SECONDS
    assert throttle.wait_seconds("10.0.0.2") == 0
    now[0] = WINDOW_SECONDS - 1
    assert throttle.wait_seconds("10.0.0.1") == 1
    now[0] = WINDOW_SECONDS
    assert throttle.wait_seconds("10.0.0.1") == 0, "the oldest failure has aged out"


def test_the_names_answered_follow_the_address_bound() -> None:
    loopback = {"127.0.0.1", "localhost", "::1"}
    assert allowed_hosts("127.0.0.1") == loopback
    assert allowed_hosts("[::1]") == loopback
    assert allowed_hosts("0.0.0.0", ["Console.Example:443"]) == loopback | {"console.example"}
    assert allowed_hosts("10.0.0.5") == {"10.0.0.5"}
    assert [host_name(h) for h in ("[::1]:8400", "Example.com:80", "::1", "a:b")] == [
        "::1",
        "example.com",
        "::1",
        "a:b",
    ]
    assert [is_loopback(h) for h in ("localhost", "127.0.0.2", "::1", "0.0.0.0", "box")] == [
        True,
        True,
        True,
        False,
        False,
    ]
