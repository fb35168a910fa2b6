"""The JSON log line: fields, context from `extra=`, and a traceback in one line."""

import json
import logging
import sys

from outbox.positions import Position
from outbox_cli.log_format import JsonLogFormatter


def record(**extra: object) -> logging.LogRecord:
    made = logging.LogRecord("poller.daemon", logging.WARNING, __file__, 1, "x %s", ("y",), None)
    made.__dict__.update(extra)
    return made


def test_a_record_is_one_line_of_json_with_its_context() -> None:
    line = JsonLogFormatter().format(
        record(subscription="b\x1bx", leader_token=7, position=Position(3, 4), message_id=None)
    )
    assert "\n" not in line
    assert "\x1b" not in line  # escaped as \u001b
    document = json.loads(line)
    assert document["message"] == "x y"
    assert document["level"] == "WARNING"
    assert (document["subscription"], document["leader_token"]) == ("b\x1bx", 7)
    assert document["position"] == "3:4"
    assert "message_id" not in document  # absent, not null


def test_an_exception_goes_in_its_own_field() -> None:
    try:
        raise ValueError("boom")
    except ValueError:
        failed = record()
        failed.exc_info = sys.exc_info()
    document = json.loads(JsonLogFormatter().format(failed))
    assert "ValueError: boom" in document["exception"]
