import logging

import pytest

from poller.database.urls import PasswordMaskingFilter, mask_password


@pytest.mark.parametrize(
    ("text", "masked"),
    [
        ("postgresql://app:s3cret@db:5432/x", "postgresql://app:***@db:5432/x"),
        ("connect postgresql://app:p%40ss@db/x failed", "connect postgresql://app:***@db/x failed"),
        ("postgresql://app@db/x", "postgresql://app@db/x"),
        ("host=db password=s3cret user=app", "host=db password=*** user=app"),
        ("host=db password='two words' user=app", "host=db password=*** user=app"),
    ],
)
def test_passwords_are_masked(text: str, masked: str) -> None:
    assert mask_password(text) == masked


def test_log_records_and_their_arguments_are_masked(caplog: pytest.LogCaptureFixture) -> None:
    logger = logging.getLogger("test.masking")
    logger.addFilter(PasswordMaskingFilter())
    with caplog.at_level(logging.INFO, logger="test.masking"):
        logger.info("using %s", "postgresql://u:hunter2@h/db")
    assert "hunter2" not in caplog.text
    assert "postgresql://u:***@h/db" in caplog.text
