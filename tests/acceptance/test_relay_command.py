"""`outbox relay` refuses what it cannot relay to before it starts: one line naming the bad
value, exit 2, no traceback, the password masked."""

import asyncio
import uuid
from pathlib import Path

import nats
import pytest
from nats.js.api import StorageType, StreamConfig

from tests.support import brokers
from tests.support.cli import outbox_command
from tests.support.daemons import daemon_group
from tests.support.stored import create_subscription

# Never reached: each of these is refused before the relay connects. A daemon given no database
# at all refuses that first (tests/acceptance/test_database_option.py).
UNREACHED_DATABASE = "postgresql://app@db.invalid/app"


@pytest.mark.parametrize(
    ("url", "named"),
    [
        ("ftp://user:s3cret@host/x", "scheme 'ftp'"),
        ("nats://user:s3cret@127.0.0.1:4222?subjet=orders", "unknown parameter 'subjet'"),
        ("redis://127.0.0.1:6379/0?stream=orders.{nope}", "{nope}"),
        (
            "amqp://user:s3cret@127.0.0.1:5672/?exchange=x&routing_key={message_type!r}",
            "routing_key",
        ),
        ("http://127.0.0.1:1/hook?secret_env=OUTBOX_TEST_UNSET_SECRET", "OUTBOX_TEST_UNSET_SECRET"),
        # Passwords with an unencoded '/' or '@', and a token: never read as a host or shown.
        ("redis://user:pa/s3cret@127.0.0.1/0?stream=x&y=1", "unknown parameter 'y'"),
        ("amqp://u:s3cret/x@h:5672/v?exchange=e&z=1", "unknown parameter 'z'"),
        ("nats://user:p@s3cret@127.0.0.1:4222?subject=a&x=1", "unknown parameter 'x'"),
        ("nats://s3cret@127.0.0.1:4222?subject=a&x=1", "unknown parameter 'x'"),
        ("http://u:p@s3cret/d@h:1/hook?mode=x", "mode='x'"),
    ],
)
def test_a_bad_url_is_refused_at_start(url: str, named: str) -> None:
    result = outbox_command(["relay", "--subscription", "sub", "--to", url], UNREACHED_DATABASE)
    assert result.returncode == 2, result.stderr
    assert named in result.stderr
    assert "s3cret" not in result.stderr + result.stdout
    assert "Traceback" not in result.stderr


def test_the_url_comes_from_the_environment_or_a_file_off_the_command_line(
    tmp_path: Path,
) -> None:
    """Credentials in --to are visible to every user of the host (`ps`). The URL given by
    OUTBOX_RELAY_TO or --to-file is the one the relay takes: refused here for its parameter,
    which shows it was read, and its password is never printed."""
    url = "nats://user:s3cret@127.0.0.1:4222?subjet=orders"
    from_variable = outbox_command(
        ["relay", "--subscription", "sub"], UNREACHED_DATABASE, OUTBOX_RELAY_TO=url
    )
    secret_file = tmp_path / "relay-url"
    secret_file.write_text(url + "\n")
    from_file = outbox_command(
        ["relay", "--subscription", "sub", "--to-file", str(secret_file)], UNREACHED_DATABASE
    )
    for done in (from_variable, from_file):
        assert done.returncode == 2, done.stdout + done.stderr
        assert "unknown parameter 'subjet'" in done.stderr
        assert "s3cret" not in done.stdout + done.stderr
    both = outbox_command(
        ["relay", "--subscription", "sub", "--to", url, "--to-file", str(secret_file)],
        UNREACHED_DATABASE,
    )
    assert both.returncode == 2
    assert "give --to or --to-file, not both" in both.stderr
    secret_file.write_text("")
    empty = outbox_command(
        ["relay", "--subscription", "sub", "--to-file", str(secret_file)], UNREACHED_DATABASE
    )
    assert empty.returncode == 2
    assert f"--to-file {secret_file}: it must hold one URL on one line" in empty.stderr
    shown = outbox_command(["relay", "--help"], None)
    assert "--to-file" in shown.stdout
    assert "OUTBOX_RELAY_TO" in shown.stdout


def test_the_config_file_names_the_relay(tmp_path: Path) -> None:
    config = tmp_path / "relay.toml"
    config.write_text('subscriptions = ["sub"]\n[relay]\nto = "nats://h:4222?subjet=x"\n')
    result = outbox_command(["relay", "--config", str(config)], UNREACHED_DATABASE)
    assert result.returncode == 2, result.stderr
    assert "unknown parameter 'subjet'" in result.stderr
    config.write_text('subscriptions = ["sub"]\n[relay]\nto = "nats://h:4222"\nwhere = 1\n')
    result = outbox_command(["relay", "--config", str(config)], UNREACHED_DATABASE)
    assert result.returncode == 2, result.stderr
    assert "relay.where" in result.stderr


def test_a_destination_that_cannot_keep_the_promise_is_named_at_start(
    database_url: str, tmp_path: Path
) -> None:
    """Before any message: a 2-minute duplicate window in memory storage is warned about."""
    brokers.require(brokers.NATS)
    name = f"RELAY_START_{uuid.uuid4().hex[:8]}"
    subject = name.lower()

    async def stream(create: bool) -> None:
        connection = await nats.connect(f"nats://{brokers.NATS[1]}:{brokers.NATS[2]}")
        js = connection.jetstream()
        if create:
            config = StreamConfig(name=name, subjects=[f"{subject}.>"], storage=StorageType.MEMORY)
            await js.add_stream(config, duplicate_window=120)
        else:
            await js.delete_stream(name)
        await connection.close()

    asyncio.run(stream(create=True))
    create_subscription(database_url, "sub", "pub")
    try:
        with daemon_group(database_url, tmp_path) as group:
            url = f"nats://127.0.0.1:{brokers.NATS[2]}?subject={subject}.{{message_type}}"
            relay = group.start("sub", relay_to=f"{url}&stream={name}")
            relay.wait_for_log(r"remembers Msg-Ids for 120 s \(duplicate_window\)", 30)
            relay.wait_for_log("keeps its messages in memory", 5)
            relay.leading_from("sub")  # the checks came first, and the relay goes on
            assert relay.terminate() == 0, relay.log()
    finally:
        asyncio.run(stream(create=False))
