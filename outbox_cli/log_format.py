"""How log records are written: readable lines for people (the default), or JSON lines.

`outbox poll --log-format json` writes one JSON object per line, for log collectors: `time`
(RFC 3339, UTC), `level`, `logger`, `message` (already masked), and where known
`subscription`, `leader_token`, `position` (TX:POS), `epoch`, `message_id`, and `exception`
(the traceback text). The daemon labels records with the subscription and term through
poller.daemon.log_context and passes the rest with `extra=`.
"""

import datetime
import json
import logging

from poller.daemon.log_context import LogContextFilter

LOG_FORMATS = ("text", "json")
DEFAULT_LOG_FORMAT = "text"
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

# Context a record may carry (from LogContextFilter or `extra=`), in the order written.
CONTEXT_FIELDS = ("subscription", "leader_token", "epoch", "position", "message_id")


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
    handler.setFormatter(logging.Formatter(TEXT_FORMAT))
    return handler


def use_log_format(log_format: str) -> None:
    formatter = JsonLogFormatter() if log_format == "json" else logging.Formatter(TEXT_FORMAT)
    for handler in logging.getLogger().handlers:
        handler.setFormatter(formatter)
