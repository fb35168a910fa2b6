"""Keeping passwords and tokens out of logs and error messages."""

import logging
import re

# scheme:// where a URL may start: only where a run of scheme characters starts (the
# lookbehind), so a long hostile value (an error quoting a 100 KB URL) is scanned once.
_URL_START = re.compile(r"(?<![a-z0-9+.-])(?P<scheme>[a-z][a-z0-9+.-]*)://", re.I)
_AUTHORITY_END = re.compile(r"[\s?#\"'<>]")
# user:secret@host without a well-formed scheme (`postgresql//u:pw@h`, `u:pw@h`): psycopg reads
# such a string as conninfo and quotes it whole in its error. A slash cannot be part of either
# side, so `postgresql://app@db` (no password) is left alone.
_BARE_USERINFO = re.compile(
    r"(?<![^\s:/@\"'])(?P<head>[^\s:/@\"']+:)(?P<secret>[^\s:/@\"']+)(?P<tail>@)"
)
_CONNINFO_PASSWORD = re.compile(r"(?P<head>\bpassword\s*=\s*)(?P<secret>'[^']*'|\S+)", re.I)

_USER_NAMES_ONLY = frozenset({"postgresql", "postgres"})
"""Schemes whose user-info without a ':' is a user name; elsewhere it may be a token
(`nats://TOKEN@host`), so it is masked whole."""


def userinfo_end(text: str, start: int, limit: int | None = None) -> int:
    """Where the user-info of the URL whose authority starts at `start` ends: its last '@'
    before the query, the fragment or white space (so an unencoded '/' or '@' in a password
    stays inside it), or -1 when the URL has none. Parsing and masking both use this rule, so
    what a relay reads as a password is what every message masks."""
    end = len(text) if limit is None else limit
    found = _AUTHORITY_END.search(text, start, end)
    return text.rfind("@", start, found.start() if found else end)


def mask_password(text: str) -> str:
    """Replace any password in a URL or conninfo string inside `text` with ***, and a
    user-info that may be a token (`nats://TOKEN@host`) with *** whole."""
    text = _mask_urls(text)
    text = _BARE_USERINFO.sub(r"\g<head>***\g<tail>", text)
    return _CONNINFO_PASSWORD.sub(lambda m: m["head"] + "***", text)


def mask_userinfo(text: str) -> str:
    """`text`, a URL, with its whole user-info (user and password, or a token) as ***."""
    match = _URL_START.match(text)
    if match is None:
        return mask_password(text)
    at = userinfo_end(text, match.end())
    if at < 0:
        return mask_password(text)
    return text[: match.end()] + "***" + mask_password(text[at:])


def _mask_urls(text: str) -> str:
    starts = list(_URL_START.finditer(text))
    if not starts:
        return text
    parts: list[str] = []
    done = 0
    for number, match in enumerate(starts):
        # A user-info never holds another scheme://: each scan stops at the next one.
        limit = starts[number + 1].start() if number + 1 < len(starts) else len(text)
        at = userinfo_end(text, match.end(), limit)
        if at < 0:
            continue
        userinfo = text[match.end() : at]
        user, colon, secret = userinfo.partition(":")
        if colon:
            masked = f"{user}:***" if secret else userinfo
        elif match["scheme"].lower() in _USER_NAMES_ONLY:
            masked = userinfo
        else:
            masked = "***"
        parts += (text[done : match.end()], masked)
        done = at
    parts.append(text[done:])
    return "".join(parts)


class PasswordMaskingFilter(logging.Filter):
    """Masks passwords in every record, including its arguments and exception text."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.msg = mask_password(record.getMessage())
        record.args = None
        if record.exc_info and record.exc_info[1] is not None:
            record.exc_text = mask_password(logging.Formatter().formatException(record.exc_info))
            record.exc_info = None
        return True
