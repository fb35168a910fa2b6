"""Keeping passwords out of logs and error messages."""

import logging
import re

# postgresql://user:secret@host and key=value conninfo strings (password=secret).
_URL_PASSWORD = re.compile(
    r"(?P<head>[a-z][a-z0-9+.-]*://[^:/@\s]*:)(?P<secret>[^@\s]*)(?P<tail>@)"
)
_CONNINFO_PASSWORD = re.compile(r"(?P<head>\bpassword\s*=\s*)(?P<secret>'[^']*'|\S+)", re.I)


def mask_password(text: str) -> str:
    """Replace any password in a URL or conninfo string inside `text` with ***."""
    text = _URL_PASSWORD.sub(lambda m: m["head"] + ("***" if m["secret"] else "") + m["tail"], text)
    return _CONNINFO_PASSWORD.sub(lambda m: m["head"] + "***", text)


class PasswordMaskingFilter(logging.Filter):
    """Masks passwords in every record, including its arguments and exception text."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.msg = mask_password(record.getMessage())
        record.args = None
        if record.exc_info and record.exc_info[1] is not None:
            record.exc_text = mask_password(logging.Formatter().formatException(record.exc_info))
            record.exc_info = None
        return True
