"""Every command takes --database-url; a daemon starts the embedded server only when asked.

A deployment that lost OUTBOX_DATABASE_URL used to start `outbox poll` on an empty embedded
database under ./.outbox and report healthy. The other commands keep the embedded default
(tests/acceptance/test_database_commands.py: `db url` and `migrate` without a URL)."""

import shutil
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import click
import pytest
from psycopg.conninfo import conninfo_to_dict

from outbox_cli.main import cli
from tests.support.cli import outbox_command, outbox_succeeds
from tests.support.databases import server_address

DAEMONS = {
    "poll": ["poll", "--subscription", "billing", "--handler", "json:loads"],
    "relay": ["relay", "--subscription", "billing", "--to", "http://127.0.0.1:1/hook"],
}


def leaf_commands(
    command: click.Command, path: str = "outbox"
) -> Iterator[tuple[str, click.Command]]:
    if isinstance(command, click.Group):
        for name, subcommand in command.commands.items():
            yield from leaf_commands(subcommand, f"{path} {name}")
    else:
        yield path, command


def with_password(url: str, password: str) -> str:
    """A URL to the test server as role `app` (which does not exist) with `password`: the
    login is refused at once, a failure no daemon retries."""
    address = server_address(url)
    dbname = conninfo_to_dict(url).get("dbname", "postgres")
    if isinstance(address, tuple):
        host, port = address
        return f"postgresql://app:{password}@{host}:{port}/{dbname}"
    socket_directory, _, socket_name = address.rpartition("/")
    socket_port = socket_name.rsplit(".", 1)[-1]
    return f"postgresql://app:{password}@:{socket_port}/{dbname}?host={quote(socket_directory)}"


def test_every_command_takes_database_url() -> None:
    commands = dict(leaf_commands(cli))
    assert len(commands) > 20  # the walk reached the commands of every group
    without = [path for path, command in commands.items() if not _has_option(command)]
    assert without == []


def _has_option(command: click.Command) -> bool:
    return any("--database-url" in getattr(param, "opts", ()) for param in command.params)


@pytest.mark.parametrize("variable", [None, "", " \t"], ids=["unset", "empty", "blank"])
@pytest.mark.parametrize("daemon", sorted(DAEMONS))
def test_a_daemon_without_a_database_refuses_in_one_line(
    daemon: str, variable: str | None, tmp_path: Path
) -> None:
    """A blank OUTBOX_DATABASE_URL is none: libpq would connect to its defaults with it."""
    data_dir = tmp_path / "data"
    done = outbox_command(DAEMONS[daemon], variable, OUTBOX_DATA_DIR=str(data_dir))
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stdout == ""
    assert done.stderr == (
        f"Error: outbox {daemon} needs a database: pass --database-url or set"
        f" OUTBOX_DATABASE_URL (or --embedded-database to start the embedded PostgreSQL under"
        f" {data_dir})\n"
    )
    assert not data_dir.exists(), "an embedded server was started"


def test_a_daemon_asked_for_the_embedded_database_starts_it(tmp_path: Path) -> None:
    # A short path: the server's Unix socket lives in the data directory.
    data_dir = Path("/tmp") / f"outbox-emb-{tmp_path.name[-12:]}"
    try:
        done = outbox_command(
            [*DAEMONS["poll"], "--embedded-database"], None, OUTBOX_DATA_DIR=str(data_dir)
        )
        # It reached the fresh embedded server, which has no outbox schema yet.
        assert done.returncode == 1, done.stdout + done.stderr
        assert "run `outbox migrate`" in done.stderr
        assert (data_dir / "pgdata" / "PG_VERSION").exists()
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)


def test_database_url_is_used_before_the_variable(database_url: str) -> None:
    elsewhere = "postgresql://app:s3cret@db.invalid/app"
    created = outbox_command(
        [
            "subscription",
            "create",
            "billing",
            "--publication",
            "orders",
            *("--database-url", database_url),
        ],
        elsewhere,
    )
    assert created.returncode == 0, created.stderr
    listed = outbox_succeeds(elsewhere, "subscription", "list", "--database-url", database_url)
    assert "billing" in listed
    # A daemon given --database-url alone starts on it: this subscription is not there.
    done = outbox_command(
        [
            "poll",
            "--subscription",
            "absent",
            "--handler",
            "json:loads",
            *("--database-url", database_url),
        ],
        None,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "subscription 'absent' does not exist" in done.stderr


def test_db_start_with_database_url_leaves_the_embedded_server_alone(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    done = outbox_command(
        ["db", "start", "--database-url", "postgresql://app@db.invalid/app"],
        None,
        OUTBOX_DATA_DIR=str(data_dir),
    )
    assert done.returncode == 0, done.stderr
    assert (
        done.stderr
        == "--database-url is given, so the embedded server is not used: nothing to start\n"
    )
    assert not data_dir.exists()


@pytest.mark.parametrize(
    "arguments",
    [
        ["status"],
        ["migrate"],
        ["subscription", "list"],
        ["message", "show", "orders", "--position", "1:1"],
        DAEMONS["poll"],
        ["db", "url"],
    ],
    ids=lambda arguments: " ".join(arguments[:2]),
)
def test_a_password_given_on_the_command_line_is_never_shown(
    database_url: str, arguments: list[str]
) -> None:
    url = with_password(database_url, "s3cret")
    done = outbox_command([*arguments, "--database-url", url], None)
    output = done.stdout + done.stderr
    assert "s3cret" not in output
    assert "app:***@" in output  # named, masked
    assert "Traceback" not in output
