"""`outbox console` refuses what it cannot serve with, in one line (exit 2), before it binds a
port, and never prints a token."""

from pathlib import Path

import pytest

from tests.support.cli import outbox_command


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
