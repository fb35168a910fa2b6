"""`outbox console` refuses what it cannot serve with, in one line (exit 2), before it binds a
port, and never prints a token; it serves beyond this machine without a token only when told
to, and believes forwarded headers only from the proxies it was given."""

import re
from pathlib import Path

import httpx
import pytest

from tests.support.cli import outbox_command
from tests.support.console_server import console_server
from tests.support.own_servers import free_port


@pytest.mark.parametrize(
    ("arguments", "line"),
    [
        (["--root-path", "outbox"], "--root-path 'outbox' is not a path prefix like /outbox"),
        (["--root-path", "/outbox/"], "--root-path '/outbox/' is not a path prefix"),
        (["--port", "0"], "Invalid value for '--port'"),
        (["--sample-interval", "0"], "Invalid value for '--sample-interval'"),
    ],
)
def test_a_bad_option_is_refused_in_one_line(
    database_url: str, arguments: list[str], line: str
) -> None:
    done = outbox_command(["console", *arguments], database_url)
    assert done.returncode == 2, done.stdout + done.stderr
    assert line in done.stderr


def test_a_token_too_short_is_refused_without_printing_it(
    database_url: str, tmp_path: Path
) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text("alice: hunter2\n")
    from_file = outbox_command(["console", "--token-file", str(tokens)], database_url)
    from_variable = outbox_command(["console"], database_url, OUTBOX_CONSOLE_TOKEN="hunter2")
    for done in (from_file, from_variable):
        assert done.returncode == 2, done.stdout + done.stderr
        assert "a token must be at least 16 characters" in done.stderr
        assert "hunter2" not in done.stdout + done.stderr
    assert f"token file '{tokens}' line 1" in from_file.stderr
    assert "OUTBOX_CONSOLE_TOKEN" in from_variable.stderr


def test_serving_beyond_this_machine_without_a_token_needs_saying_so(
    database_url: str, tmp_path: Path
) -> None:
    port = str(free_port())
    refused = outbox_command(
        ["console", "--host", "0.0.0.0", "--port", port], database_url, timeout=20
    )
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "--host '0.0.0.0' serves the console beyond this machine, and there is no token" in (
        refused.stderr
    )
    served = console_server(
        database_url,
        tmp_path / "console.log",
        "--host",
        "0.0.0.0",
        "--serve-without-token",
        token=None,
    )
    with served as console, httpx.Client(base_url=console.base_url) as client:
        assert client.get("/").status_code == 200
        assert client.get("/", headers={"host": "attacker.example"}).status_code == 400


@pytest.mark.parametrize("trusted", [False, True])
def test_forwarded_headers_are_believed_only_from_the_proxies_named(
    database_url: str, tmp_path: Path, trusted: bool
) -> None:
    options = ["--forwarded-allow-ips", "127.0.0.1"] if trusted else []
    forwarded = {"x-forwarded-for": "203.0.113.9", "x-forwarded-proto": "https"}
    with (
        console_server(database_url, tmp_path / "console.log", *options) as console,
        httpx.Client(base_url=console.base_url, headers=forwarded) as client,
    ):
        form = client.get("/sign-in")
        match = re.search(r'name="csrf" value="([0-9a-f]+)"', form.text)
        assert match, form.text
        client.post("/sign-in", data={"csrf": match.group(1), "token": "w" * 20})
        log = console.log()
    assert ("Secure" in form.headers["set-cookie"]) == trusted
    refusal = next(line for line in log.splitlines() if "action refused: sign-in" in line)
    assert ("from 203.0.113.9" in refusal) == trusted, refusal
    assert ("from 127.0.0.1" in refusal) != trusted, refusal
