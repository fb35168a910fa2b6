"""One exit-code rule for every command (outbox_cli/errors.py): 2 when the command as typed
can never work (an unknown option, a missing or contradicting one, a value malformed or out of
range, a confirmation it cannot ask for), 1 when a well-formed command fails now (the
database, something named that does not exist, a state that refuses it). Every command is
tried here with input of both kinds, in this process (click's runner) to keep it quick."""

import logging
from collections.abc import Callable, Iterator

import psycopg
import pytest
from click.testing import CliRunner

import outbox
from outbox_cli.main import cli
from outbox_cli.settings import command_line_settings
from poller import operations
from tests.support.cli import outbox_environment
from tests.support.databases import DatabaseFactory

Invoke = Callable[..., tuple[int, str]]
"""`outbox ARGUMENTS` against the test's database (or a URL given): exit code, stderr."""

USAGE = [
    ["no-such-command"],
    ["status", "--no-such-option"],
    ["--log-level", "LOUD", "status"],
    ["status", "--retention-stale-after", "-1"],
    ["subscription", "create", "new"],
    ["subscription", "create", "new", "--publication", "orders", "--from", "1:2:3"],
    ["subscription", "create", "new", "--publication", "orders", "--from", "yesterday"],
    ["subscription", "create", "new", "--publication", "orders", "--shards", "0"],
    ["subscription", "create", "new", "--publication", "orders", "--consumers", "0"],
    ["subscription", "create", "bad\nname", "--publication", "orders"],
    ["subscription", "update", "billing"],
    ["subscription", "update", "billing", "--retry-backoff-initial", "604800"],
    ["seek", "billing"],
    ["seek", "billing", "--to", "yesterday"],
    ["seek", "billing", "--to", "99999999999999999999:1"],
    ["seek", "billing", "--to-time", "tomorrow"],
    ["seek", "billing", "--to-time", "2024-05-01T10:00:00"],
    ["skip", "billing", "--to", "soon"],
    ["parked", "list", "billing", "--limit", "0"],
    ["parked", "show", "billing", "x"],
    ["parked", "replay", "billing", "-1"],
    ["parked", "replay", "billing", "1", "--id", "m-0"],
    ["parked", "purge", "billing"],  # no terminal to ask, no --yes
    ["parked", "purge", "billing", "1:2:3", "--yes"],
    ["message", "show", "orders"],
    ["message", "show", "orders", "--position", "x"],
    ["prune", "--partition-size", "0"],
    ["poll", "--handler", "json:loads"],
    ["poll", "--subscription", "billing"],
    ["poll", "--subscription", "billing", "--handler", "../etc:passwd"],
    ["poll", "--subscription", "billing", "--handler", "json:no_such_thing"],
    ["poll", "--subscription", "billing", "--handler", "json:loads", "--lease-seconds", "0"],
    ["relay", "--subscription", "billing"],
    ["relay", "--subscription", "billing", "--to", "ftp://example.com/x"],
    ["tail", "--publication", "orders", "--from", "later"],
    ["demo", "--writers", "0"],
    ["migrate", "--revision", "no-such-revision"],
    ["spark", "run", "no-such-job"],
]

FAILURE = [
    ["subscription", "show", "missing"],
    ["subscription", "create", "billing", "--publication", "orders"],
    ["subscription", "delete", "missing"],
    ["seek", "missing", "--to", "end"],
    ["seek", "billing", "--to", f"{2**62}:1"],  # a transaction that has not happened yet
    ["seek", "billing", "--to-message", "no-such-message"],
    ["skip", "billing", "--to", "0:0"],  # already past it
    ["parked", "list", "missing"],
    ["parked", "show", "billing", "999999"],
    ["parked", "replay", "billing", "999999"],
    ["parked", "replay", "billing", "--id", "no-such-message"],
    ["parked", "purge", "missing", "--yes"],
    ["message", "show", "orders", "--id", "no-such-message"],
    ["message", "show", "orders", "--position", "999999"],
    ["poll", "--subscription", "missing", "--handler", "json:loads"],
]


@pytest.fixture(scope="module")
def database_url(database_factory: DatabaseFactory) -> Iterator[str]:
    """One database for the module: every command here is refused, so none changes it."""
    url = database_factory.create()
    yield url
    database_factory.drop(url)


@pytest.fixture(scope="module")
def run(database_url: str) -> Iterator[Invoke]:
    with psycopg.connect(database_url) as conn:
        position = outbox.append(conn, "orders", "OrderPlaced", {}, message_id="m-0")
        operations.create(conn, "billing", "orders", "end", {})
        conn.execute(
            "INSERT INTO outbox.parked_messages"
            " (subscription_id, position, transaction_id, attempts, last_error)"
            " SELECT 'billing', position, transaction_id, 3, 'boom' FROM outbox.messages"
            " WHERE position = %s",
            (position,),
        )
    handlers = logging.root.handlers[:]

    def invoke(arguments: list[str], url: str = database_url) -> tuple[int, str]:
        command_line_settings.cache_clear()  # the environment is read once per process
        try:
            result = CliRunner().invoke(cli, arguments, env=outbox_environment(url))
        finally:
            logging.root.handlers[:] = handlers  # the command's handler wrote to the runner
        return result.exit_code, result.stderr

    yield invoke
    command_line_settings.cache_clear()


@pytest.mark.parametrize("arguments", USAGE, ids=" ".join)
def test_a_command_that_can_never_work_as_typed_exits_2(run: Invoke, arguments: list[str]) -> None:
    code, stderr = run(arguments)
    assert code == 2, stderr
    assert "Traceback" not in stderr
    assert stderr.rstrip("\n").splitlines()[-1].startswith("Error: "), stderr


@pytest.mark.parametrize("arguments", FAILURE, ids=" ".join)
def test_a_well_formed_command_that_fails_now_exits_1(run: Invoke, arguments: list[str]) -> None:
    code, stderr = run(arguments)
    assert code == 1, stderr
    assert len(stderr.strip().splitlines()) == 1, stderr
    assert stderr.startswith("Error: "), stderr


def test_a_database_that_does_not_answer_exits_1(run: Invoke) -> None:
    code, stderr = run(["status"], "postgresql://postgres@127.0.0.1:1/x")
    assert code == 1, stderr
    assert "cannot connect to the database postgresql://postgres@127.0.0.1:1/x" in stderr
