"""`outbox relay` refuses what it cannot relay to before it starts: one line naming the bad
value, exit 2, no traceback, the password masked."""

from pathlib import Path

import pytest

from tests.support.cli import outbox_command


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
    result = outbox_command(["relay", "--subscription", "sub", "--to", url], None)
    assert result.returncode == 2, result.stderr
    assert named in result.stderr
    assert "s3cret" not in result.stderr + result.stdout
    assert "Traceback" not in result.stderr


def test_the_config_file_names_the_relay(tmp_path: Path) -> None:
    config = tmp_path / "relay.toml"
    config.write_text('subscriptions = ["sub"]\n[relay]\nto = "nats://h:4222?subjet=x"\n')
    result = outbox_command(["relay", "--config", str(config)], None)
    assert result.returncode == 2, result.stderr
    assert "unknown parameter 'subjet'" in result.stderr
    config.write_text('subscriptions = ["sub"]\n[relay]\nto = "nats://h:4222"\nwhere = 1\n')
    result = outbox_command(["relay", "--config", str(config)], None)
    assert result.returncode == 2, result.stderr
    assert "relay.where" in result.stderr
