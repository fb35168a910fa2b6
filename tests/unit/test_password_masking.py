import logging
import time

import pytest

from outbox.database_url import PasswordMaskingFilter, mask_password, mask_userinfo


@pytest.mark.parametrize(
    ("text", "masked"),
    [
        ("postgresql://app:s3cret@db:5432/x", "postgresql://app:***@db:5432/x"),
        ("connect postgresql://app:p%40ss@db/x failed", "connect postgresql://app:***@db/x failed"),
        ("postgresql://app@db/x", "postgresql://app@db/x"),
        ("host=db password=s3cret user=app", "host=db password=*** user=app"),
        ("host=db password='two words' user=app", "host=db password=*** user=app"),
        # Malformed URLs psycopg reads as conninfo and quotes whole in its error.
        (
            'missing "=" after "postgresql//postgres:s3cretpw@127.0.0.1/x" in connection info',
            'missing "=" after "postgresql//postgres:***@127.0.0.1/x" in connection info',
        ),
        ("postgresql:/app:s3cret@db/x", "postgresql:/app:***@db/x"),
        ("app:s3cret@db:5432/x", "app:***@db:5432/x"),
        # A token is the whole user-info; a password may hold an unencoded '/' or '@'.
        ("nats://s3cretTOKEN@h:4222?subject=a", "nats://***@h:4222?subject=a"),
        ("at redis://u:pa/ss@h/0 and", "at redis://u:***@h/0 and"),
        ("nats://u:p@ss@h:4222?subject=a", "nats://u:***@h:4222?subject=a"),
        ("http://u:p@w/d@h:1/hook", "http://u:***@h:1/hook"),
    ],
)
def test_passwords_are_masked(text: str, masked: str) -> None:
    assert mask_password(text) == masked


@pytest.mark.parametrize("text", ["postgresql://" + "u" * 1_000_000, "a://b:" * 200_000])
def test_masking_a_long_value_takes_linear_time(text: str) -> None:
    # Unbounded repeats scanned to the end from every start: minutes for a 100 KB URL, hours
    # for these. Linear, the slower one takes half a second on an idle 2-core machine; the
    # bound leaves room for one loaded by other tests (it took over 1 s at load 17).
    started = time.monotonic()
    mask_password(text)
    assert time.monotonic() - started < 10


@pytest.mark.parametrize(
    ("url", "masked"),
    [
        ("nats://u:s3cret@h:4222?subject=a", "nats://***@h:4222?subject=a"),
        ("nats://s3cretTOKEN@h", "nats://***@h"),
        ("redis://u:pa/ss@h/0?stream=s", "redis://***@h/0?stream=s"),
        ("http://h/hook", "http://h/hook"),
    ],
)
def test_a_relay_url_shows_no_user_info(url: str, masked: str) -> None:
    assert mask_userinfo(url) == masked


def test_log_records_and_their_arguments_are_masked(caplog: pytest.LogCaptureFixture) -> None:
    logger = logging.getLogger("test.masking")
    logger.addFilter(PasswordMaskingFilter())
    with caplog.at_level(logging.INFO, logger="test.masking"):
        logger.info("using %s", "postgresql://u:hunter2@h/db")
    assert "hunter2" not in caplog.text
    assert "postgresql://u:***@h/db" in caplog.text
