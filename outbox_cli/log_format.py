"""How log records are written: readable lines for people (the default), or JSON lines.

`outbox poll --log-format json` writes one JSON object per line, for log collectors: `time`
(RFC 3339, UTC), `level`, `logger`, `message` (already masked), and where known
`subscription`, `shard` (`SHARD/COUNT`, `0/1` for a plain subscription), `leader_token`,
`position` (TX:POS), `epoch`, `message_id`, and `exception` (the traceback text). The daemon
labels records with the subscription, shard and term through poller.daemon.log_context and
passes the rest with `extra=`. A text line names the shard after the logger (`[shard 2/4]`)
when the subscription has several.
"""

import datetime
import json
import logging

from poller.daemon import LogContextFilter

LOG_FORMATS = ("text", "json")
DEFAULT_LOG_FORMAT = "text"
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

# Context a record may carry (from LogContextFilter or `extra=`), in the order written.
CONTEXT_FIELDS = ("subscription", "shard", "leader_token", "epoch", "position", "message_id")

# The shard of a plain subscription (one shard): the text lines leave it out.
_ONLY_SHARD = "0/1"


class TextLogFormatter(logging.Formatter):
    """TEXT_FORMAT, and `[shard 2/4]` after the logger for a record of one shard of several:
    a process leading shards 0 and 2 of a subscription says the same words for both."""

    def __init__(self) -> None:
        super().__init__(TEXT_FORMAT)

    def formatMessage(self, record: logging.LogRecord) -> str:  # noqa: N802 (logging's name)
        shard = getattr(record, "shard", None)
        if shard is None or shard == _ONLY_SHARD:
            return super().formatMessage(record)
        return (
            f"{record.asctime} {record.levelname} {record.name} [shard {shard}]: {record.message}"
        )


class JsonLogFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        document: dict[str, object] = {
            "time": datetime.datetime.fromtimestamp(record.created, datetime.UTC).isoformat(),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for field in CONTEXT_FIELDS:
            value = getattr(record, field, None)
            if value is not None:
                document[field] = value if isinstance(value, int | str) else str(value)
        if record.exc_info:
            document["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:  # PasswordMaskingFilter leaves the masked traceback here
            document["exception"] = record.exc_text
        # ensure_ascii: a name or an error cannot carry a raw control character into the log.
        return json.dumps(document, ensure_ascii=True)


def log_handler() -> logging.Handler:
    """The CLI's one handler (stderr), labelled with the daemon's context; `use_log_format`
    picks how it writes."""
    handler = logging.StreamHandler()
    handler.addFilter(LogContextFilter())
    handler.setFormatter(TextLogFormatter())
    return handler


def use_log_format(log_format: str) -> None:
    formatter = JsonLogFormatter() if log_format == "json" else TextLogFormatter()
    for handler in logging.getLogger().handlers:
        handler.setFormatter(formatter)
