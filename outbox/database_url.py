"""Keeping passwords out of logs and error messages."""

import logging
import re

# postgresql://user:secret@host and key=value conninfo strings (password=secret).
#
# Each pattern starts only where a run of its characters starts (the lookbehinds), and its
# parts stop at the next separator: otherwise a scan from every position of a long hostile
# value (an error quoting a 100 KB URL) takes minutes. A `/` or `@` inside a password must be
# percent-encoded in a URL anyway.
_URL_PASSWORD = re.compile(
    r"(?<![a-z0-9+.-])(?P<head>[a-z][a-z0-9+.-]*://[^:/@\s]*:)(?P<secret>[^/@\s]*)(?P<tail>@)"
)
_CONNINFO_PASSWORD = re.compile(r"(?P<head>\bpassword\s*=\s*)(?P<secret>'[^']*'|\S+)", re.I)
# user:secret@host without a well-formed scheme (`postgresql//u:pw@h`, `u:pw@h`): psycopg reads
# such a string as conninfo and quotes it whole in its error. A slash cannot be part of either
# side, so `postgresql://app@db` (no password) is left alone.
_BARE_USERINFO = re.compile(
    r"(?<![^\s:/@\"'])(?P<head>[^\s:/@\"']+:)(?P<secret>[^\s:/@\"']+)(?P<tail>@)"
)


def mask_password(text: str) -> str:
    """Replace any password in a URL or conninfo string inside `text` with ***."""
    text = _URL_PASSWORD.sub(lambda m: m["head"] + ("***" if m["secret"] else "") + m["tail"], text)
    text = _BARE_USERINFO.sub(r"\g<head>***\g<tail>", text)
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
