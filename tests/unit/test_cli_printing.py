from pathlib import Path

import psycopg
import pytest
from rich.console import Console

from outbox.positions import Position, readable
from outbox_cli.errors import CommandUsageError, one_line
from outbox_cli.first_connection import is_transient
from outbox_cli.poll_config import read_poll_config
from outbox_cli.printing import cell, escaped
from poller.operations.places import MAX_POSITION


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        ("\x1b]0;pwned\x07", "\\x1b]0;pwned\\x07"),
        ("a\tb\nc", "a\\tb\\nc"),
        ("\x9b31m", "\\x9b31m"),
        ("abc\u202efed", "abc\\u202efed"),
        ("名前🙂 [/]", "名前🙂 [/]"),
    ],
)
def test_control_characters_are_shown_escaped(value: str, shown: str) -> None:
    assert escaped(value) == shown


def test_cells_are_never_read_as_markup() -> None:
    console = Console(width=80, record=True)
    console.print(cell("[/] [bold]x[/bold]"))
    assert console.export_text().strip() == "[/] [bold]x[/bold]"


def test_a_checkpoint_at_the_frontier_reads_as_the_end_of_its_transaction() -> None:
    assert readable(Position(42, MAX_POSITION)) == "end of transaction 42"
    assert readable(Position(42, 7)) == "42:7"


def test_error_lines_are_masked_joined_escaped_and_cut() -> None:
    line = one_line("failed for postgresql://u:pw@h/x\n\tIs it up? \x1b[31m" + "z" * 1000)
    assert "pw@" not in line
    assert "\n" not in line
    assert "\\x1b[31m" in line
    assert len(line) < 450


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ('subscriptions = "billing"', "subscriptions"),
        ('subscription = ["billing"]', "subscription"),
        ("subscriptions = [1]", "subscriptions.0"),
        ('handler = "x', "not valid TOML"),
    ],
)
def test_poll_config_is_validated(tmp_path: Path, text: str, named: str) -> None:
    path = tmp_path / "poll.toml"
    path.write_text(text)
    with pytest.raises(CommandUsageError, match=named):
        read_poll_config(path)


def test_a_good_poll_config_is_read(tmp_path: Path) -> None:
    path = tmp_path / "poll.toml"
    path.write_text('handler = "app:on"\nsubscriptions = ["a", "b"]\n')
    config = read_poll_config(path)
    assert (config.handler, config.subscriptions) == ("app:on", ["a", "b"])


@pytest.mark.parametrize(
    ("message", "transient"),
    [
        ('connection to server at "h", port 1 failed: Connection refused', True),
        ("FATAL:  the database system is starting up", True),
        ('FATAL:  password authentication failed for user "app"', False),
        ('FATAL:  database "nodb" does not exist', False),
        ('connection is bad: invalid sslmode value: "bogus"', False),
    ],
)
def test_only_failures_that_waiting_can_end_are_retried(message: str, transient: bool) -> None:
    assert is_transient(psycopg.OperationalError(message)) is transient


def test_a_url_that_cannot_be_parsed_is_not_retried() -> None:
    assert not is_transient(psycopg.ProgrammingError('missing "=" after "x"'))
