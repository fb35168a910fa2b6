"""The operator's commands on values that used to break them, and the commands added for
operators: `message show`, `db start/stop/status`, `parked purge`'s confirmation."""

import json
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import psycopg
import pytest

import outbox
from outbox.positions import Position
from tests.support import brokers
from tests.support.cli import OUTBOX_SCRIPT, outbox_command
from tests.support.databases import DatabaseFactory
from tests.support.stored import create_subscription, stored_checkpoint

ESCAPE = "\x1b]0;pwned\x07"


def park(url: str, subscription: str, error: str) -> int:
    with psycopg.connect(url) as conn:
        position = outbox.append(conn, "orders", "OrderPlaced", {"n": 1})
        conn.execute(
            "INSERT INTO outbox.parked_messages "
            "(subscription_id, position, transaction_id, attempts, last_error) "
            "SELECT %s, position, transaction_id, 3, %s FROM outbox.messages WHERE position = %s",
            (subscription, error, position),
        )
    return position


@pytest.mark.parametrize("name", ["[/]", "[bold]x", ESCAPE])
def test_markup_and_escapes_in_names_and_errors_are_printed_as_text(
    database_url: str, name: str
) -> None:
    if name.isprintable():
        create_subscription(database_url, name, name)
    else:
        # `subscription create` refuses control characters now; a row written by hand (or
        # by an older version) must still print safely.
        with psycopg.connect(database_url) as conn:
            conn.execute(
                "INSERT INTO outbox.subscriptions (subscription_id, publication_id,"
                " last_processed_transaction_id, last_processed_position)"
                " VALUES (%s, %s, '0', 0)",
                (name, name),
            )
    park(database_url, name, f"boom {name}")
    for arguments in (["status"], ["subscription", "list"], ["parked", "list", name]):
        done = outbox_command(arguments, database_url)
        assert done.returncode == 0, done.stderr
        assert "\x1b" not in done.stdout
        shown = name.replace("\x1b", "\\x1b").replace("\x07", "\\x07")
        assert shown in done.stdout, done.stdout
    parked = outbox_command(["parked", "list", name], database_url)
    assert f"boom {shown}" in parked.stdout


@pytest.mark.parametrize(
    ("arguments", "option", "code"),
    # One that does not fit is a usage error (2); one in the future, the database's (1).
    [
        (["seek", "billing", "--to", "99999999999999999999:1"], "--to", 2),
        (["seek", "billing", "--to", "1:99999999999999999999"], "--to", 2),
        (["seek", "billing", "--to", "9223372036854775807:1"], "--to", 1),
        (["subscription", "create", "new", "--publication", "o", "--from", "1:2:3"], "--from", 2),
        (
            ["subscription", "create", "new", "--publication", "o", "--from", f"{2**62}:1"],
            "--from",
            1,
        ),
    ],
)
def test_positions_that_do_not_fit_or_are_in_the_future_are_refused(
    database_url: str, arguments: list[str], option: str, code: int
) -> None:
    create_subscription(database_url, "billing", "orders")
    before = stored_checkpoint(database_url, "billing")
    done = outbox_command(arguments, database_url)
    assert done.returncode == code, done.stdout
    assert option in done.stderr
    assert stored_checkpoint(database_url, "billing") == before
    with psycopg.connect(database_url) as conn:
        assert conn.execute("SELECT count(*) FROM outbox.subscriptions").fetchone() == (1,)


def test_a_password_in_a_malformed_url_is_masked() -> None:
    done = outbox_command(["status"], "postgresql//postgres:s3cretpw@127.0.0.1/x")
    assert done.returncode == 1
    assert "s3cretpw" not in done.stdout + done.stderr
    assert "postgresql//postgres:***@127.0.0.1/x" in done.stderr


def test_commands_before_migrate_say_to_migrate(database_factory: DatabaseFactory) -> None:
    url = database_factory.create(migrated=False)
    try:
        for arguments in (["status"], ["subscription", "list"], ["seek", "x", "--to", "end"]):
            done = outbox_command(arguments, url)
            assert done.returncode == 1
            assert "the outbox schema is not installed: run `outbox migrate`" in done.stderr
            assert "Traceback" not in done.stderr
    finally:
        database_factory.drop(url)


def test_purge_asks_first_and_refuses_without_a_terminal(database_url: str) -> None:
    create_subscription(database_url, "billing", "orders")
    park(database_url, "billing", "boom")
    refused = outbox_command(["parked", "purge", "billing"], database_url)
    assert refused.returncode == 2
    assert "--yes" in refused.stderr
    with psycopg.connect(database_url) as conn:
        assert conn.execute("SELECT count(*) FROM outbox.parked_messages").fetchone() == (1,)
    purged = outbox_command(["parked", "purge", "billing", "--yes"], database_url)
    assert purged.returncode == 0, purged.stderr
    assert "purged 1 parked messages" in purged.stdout


def test_replay_and_purge_take_one_parked_message_by_position_or_id(database_url: str) -> None:
    create_subscription(database_url, "billing", "orders")
    first, second, third = (park(database_url, "billing", "boom") for _ in range(3))
    replayed = outbox_command(["parked", "replay", "billing", str(first)], database_url)
    assert replayed.returncode == 0, replayed.stderr
    assert re.fullmatch(
        rf"billing: replay of the parked message at \d+:{first} requested; no daemon leads"
        r" billing now: the next leader replays it first\n",
        replayed.stdout,
    )
    listed = json.loads(
        outbox_command(["parked", "list", "billing", "--json"], database_url).stdout
    )
    requested = {row["position"]: row["replay_requested_at"] for row in listed}
    assert requested[first] is not None
    assert requested[second] is requested[third] is None
    with psycopg.connect(database_url) as conn:
        row = conn.execute("SELECT message_id FROM outbox.messages WHERE position = %s", (second,))
        (message_id,) = row.fetchone() or ("",)
    purged = outbox_command(
        ["parked", "purge", "billing", "--id", message_id, "--yes"], database_url
    )
    assert purged.stdout == "purged 1 parked messages of billing\n", purged.stderr
    with psycopg.connect(database_url) as conn:
        left = conn.execute("SELECT position FROM outbox.parked_messages ORDER BY position")
        assert [position for (position,) in left] == [first, third]


def test_a_handler_module_in_the_current_directory_is_found(
    database_url: str, tmp_path: Path
) -> None:
    (tmp_path / "myhandlers.py").write_text("def on_order(message):\n    pass\n")
    done = outbox_command(
        ["poll", "--subscription", "missing", "--handler", "myhandlers:on_order"],
        database_url,
        cwd=tmp_path,
        installed_script=True,
    )
    # The handler loaded; the next check (the subscription) is what stops it.
    assert "subscription 'missing' does not exist" in done.stderr, done.stderr


@pytest.mark.parametrize(
    ("handler", "says"),
    [
        ("takes_two", "cannot be called with one message: it takes (message: "),
        ("batch_of_two", "cannot be called with a list of messages: it takes (messages: "),
    ],
)
def test_poll_refuses_a_handler_that_cannot_take_a_message_before_connecting(
    database_url: str, handler: str, says: str
) -> None:
    """Not one parked message per delivery: the start refuses it, in one line. The
    subscription does not exist, so a check that came after connecting would say that."""
    spec = f"tests.support.handler_shapes:{handler}"
    done = outbox_command(["poll", "--subscription", "missing", "--handler", spec], database_url)
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert f"handler '{spec}' {says}" in line
    assert "missing a required argument: 'other'" in line


SHADOWING_HANDLER = """
import poller


def handle(message):
    poller.record(message)  # the application's own poller module
"""


@pytest.mark.parametrize(
    ("files", "handler", "named"),
    [
        ({"poller.py": "def record(message): ...\n"}, "handlers:handle", "poller.py"),
        ({"poller/__init__.py": "def record(message): ...\n"}, "handlers:handle", "poller"),
        # Beside the handler in its package: what `python myapp/handlers.py` would import.
        (
            {"myapp/__init__.py": "", "myapp/poller.py": "def record(message): ...\n"},
            "myapp.handlers:handle",
            "myapp/poller.py",
        ),
    ],
    ids=["module", "package", "beside-the-handler"],
)
def test_poll_refuses_an_application_poller_that_ours_would_shadow(
    database_url: str, tmp_path: Path, files: dict[str, str], handler: str, named: str
) -> None:
    """`poller` is ours and already imported: the handler's `import poller` would get it and
    every message would park with an AttributeError. The start refuses, in one line."""
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    module = handler.partition(":")[0].replace(".", "/") + ".py"
    (tmp_path / module).write_text(SHADOWING_HANDLER)
    done = outbox_command(
        ["poll", "--subscription", "missing", "--handler", handler],
        database_url,
        cwd=tmp_path,
        installed_script=True,  # as an application runs it: not `python -m` from its folder
    )
    assert done.returncode == 2, done.stdout + done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert f"{tmp_path / named} is a " in line, line
    assert "named poller, the name of outbox-poller's own package" in line
    assert "rename yours" in line


def test_poll_refuses_an_application_poller_that_ours_would_shadow_on_the_path(
    database_url: str, tmp_path: Path
) -> None:
    elsewhere = tmp_path / "lib"
    elsewhere.mkdir()
    (elsewhere / "poller.py").write_text("def record(message): ...\n")
    (tmp_path / "handlers.py").write_text(SHADOWING_HANDLER)
    done = outbox_command(
        ["poll", "--subscription", "missing", "--handler", "handlers:handle"],
        database_url,
        cwd=tmp_path,
        installed_script=True,
        PYTHONPATH=str(elsewhere),
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr == (
        f"Error: {elsewhere / 'poller.py'} is a module named poller, the name of outbox-poller's"
        " own package, so `import poller` gets ours: rename yours (and its imports), e.g. to"
        " app_poller.py\n"
    )


def test_poll_waits_for_a_server_that_is_down_and_fails_fast_on_a_wrong_login(
    database_url: str,
) -> None:
    env = {"OUTBOX_DATABASE_URL": "postgresql://postgres@127.0.0.1:1/x"}
    command = [str(OUTBOX_SCRIPT), "poll", "--subscription", "s", "--handler", "json:loads"]
    waiting = subprocess.Popen(
        command,
        env={**os.environ, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        time.sleep(3)
        assert waiting.poll() is None, "poll gave up on a server that may yet come up"
    finally:
        waiting.send_signal(signal.SIGTERM)
        _, stderr = waiting.communicate(timeout=10)
    assert "retrying" in stderr
    wrong_role = database_url.replace("user=postgres", "user=nobody_here")
    done = outbox_command(["poll", "--subscription", "s", "--handler", "json:loads"], wrong_role)
    assert done.returncode == 1
    assert 'role "nobody_here" does not exist' in done.stderr


def test_message_show_prints_the_position_that_seek_takes(database_url: str) -> None:
    with psycopg.connect(database_url) as conn:
        outbox.append(conn, "orders", "OrderPlaced", {"total": "[/]"}, message_id="order-7")
        row = conn.execute(
            "SELECT transaction_id::text::bigint, position FROM outbox.messages"
        ).fetchone()
    assert row is not None
    at = Position(*row)
    by_id = outbox_command(["message", "show", "orders", "--id", "order-7"], database_url)
    assert by_id.returncode == 0, by_id.stderr
    assert str(at) in by_id.stdout
    assert "OrderPlaced" in by_id.stdout
    assert '"[/]"' in by_id.stdout
    by_position = outbox_command(["message", "show", "orders", "--position", str(at)], database_url)
    assert "order-7" in by_position.stdout


def test_status_shows_a_checkpoint_at_the_frontier_as_the_end_of_a_transaction(
    database_url: str,
) -> None:
    created = outbox_command(
        ["subscription", "create", "billing", "--publication", "orders"], database_url
    )
    assert created.returncode == 0, created.stderr
    done = outbox_command(["status"], database_url)
    assert "end of " in done.stdout
    assert "9223372036854775807" not in done.stdout


def test_demo_cleans_up_and_refuses_nonsense_counts(database_url: str) -> None:
    for option, value in (("--writers", "-1"), ("--transactions", "0")):
        refused = outbox_command(["demo", option, value], database_url)
        assert refused.returncode == 2
        assert value in refused.stderr
    done = outbox_command(["demo", "--writers", "2", "--transactions", "3"], database_url)
    assert done.returncode == 0, done.stderr
    # With NATS on localhost the demo also relays its messages to JetStream.
    if brokers.answers(brokers.NATS[1], brokers.NATS[2]):
        relayed = re.search(r"NATS stream \S+: (\d+) messages for (\d+) committed", done.stdout)
        assert relayed is not None, done.stdout
        assert relayed[1] == relayed[2]
    else:
        assert "no NATS on 127.0.0.1:4222" in done.stdout
    with psycopg.connect(database_url) as conn:
        assert conn.execute("SELECT count(*) FROM outbox.subscriptions").fetchone() == (0,)
        assert conn.execute("SELECT count(*) FROM outbox.messages").fetchone() == (0,)


def test_a_backoff_past_the_stored_maximum_is_refused_naming_both_then_taken_with_it(
    database_url: str,
) -> None:
    """Allowed up to a week, but never above retry_backoff_max, here its default of 10 s."""
    created = outbox_command(["subscription", "create", "b", "--publication", "o"], database_url)
    assert created.returncode == 0, created.stderr
    refused = outbox_command(
        ["subscription", "update", "b", "--retry-backoff-initial", "604800"], database_url
    )
    assert refused.returncode == 2
    assert refused.stderr == (
        "Error: retry_backoff_initial (604800.0) must not exceed retry_backoff_max (10.0); to"
        " go past it, set retry_backoff_max too\n"
    )
    done = outbox_command(
        [
            "subscription",
            "update",
            "b",
            "--retry-backoff-initial",
            "604800",
            "--retry-backoff-max",
            "604800",
        ],
        database_url,
    )
    assert done.returncode == 0, done.stderr
    helped = outbox_command(["subscription", "update", "--help"], None)
    assert "at most retry_backoff_max" in " ".join(helped.stdout.split())


def test_db_start_keeps_the_embedded_server_running_until_db_stop(tmp_path: Path) -> None:
    # A short path: the server's Unix socket lives in the data directory.
    data_dir = Path("/tmp") / f"outbox-db-{tmp_path.name[-12:]}"
    env = {"OUTBOX_DATA_DIR": str(data_dir)}
    try:
        started = outbox_command(["db", "start"], None, variables=env)
        assert started.returncode == 0, started.stderr
        url = started.stdout.strip()
        with psycopg.connect(url) as conn:  # still up after the command exited
            assert conn.execute("SELECT 1").fetchone() == (1,)
        assert "running" in outbox_command(["db", "status"], None, variables=env).stdout
        stopped = outbox_command(["db", "stop"], None, variables=env)
        assert stopped.returncode == 0, stopped.stderr
        assert "not running" in outbox_command(["db", "status"], None, variables=env).stdout
    finally:
        outbox_command(["db", "stop"], None, variables=env)
        shutil.rmtree(data_dir, ignore_errors=True)


def test_db_start_with_a_configured_url_says_it_does_nothing() -> None:
    done = outbox_command(["db", "start"], "postgresql://app@db.invalid/app")
    assert done.returncode == 0
    assert "OUTBOX_DATABASE_URL is set" in done.stderr
