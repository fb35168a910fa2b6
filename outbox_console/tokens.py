"""Who may sign in, and what for: the tokens of the console's two roles.

A reader's token shows messages (payloads, headers, parked errors) and the SQL of sessions
that hold delivery back; an operator's also acts (replay, purge, skip, seek). Without signing
in, a visitor sees only where subscriptions stand.

OUTBOX_CONSOLE_TOKEN is an operator's token (named "token" in the logs) and
OUTBOX_CONSOLE_READER_TOKEN a reader's (named "reader"). A token file holds one a line:
`NAME: SECRET` (an operator; the name is what the logs say), `reader NAME: SECRET` or
`operator NAME: SECRET`, or a bare `SECRET` (an operator named "token"); blank lines and lines
starting with # are skipped. Offered tokens are compared with hmac.compare_digest against
every configured one, so the time taken says nothing about how much of a secret matched, or
which.
"""

import hmac
from pathlib import Path
from typing import NamedTuple

from outbox.names import environment_variable

OPERATOR = "operator"
READER = "reader"
ROLES = (OPERATOR, READER)
TOKEN_VARIABLE = environment_variable("console_token")
READER_TOKEN_VARIABLE = environment_variable("console_reader_token")
UNNAMED = {OPERATOR: "token", READER: "reader"}
# Shorter secrets can be guessed through the sign-in form; `openssl rand -hex 32` gives 64.
MIN_SECRET_LENGTH = 16


class TokenError(ValueError):
    """A token file or variable that cannot be used; the message never holds a secret."""


class Token(NamedTuple):
    name: str
    secret: str
    role: str = OPERATOR


def _checked(token: Token, where: str) -> Token:
    if len(token.secret) < MIN_SECRET_LENGTH:
        raise TokenError(
            f"{where}: a token must be at least {MIN_SECRET_LENGTH} characters"
            " (`openssl rand -hex 32` makes one)"
        )
    if not token.secret.isascii() or not token.secret.isprintable() or " " in token.secret:
        raise TokenError(f"{where}: a token must be printable ASCII without spaces")
    return token


def _named(before_colon: str) -> tuple[str, str]:
    """The role and name of `reader NAME` or `operator NAME`, or an operator's NAME."""
    first, _, rest = before_colon.partition(" ")
    if first in ROLES and rest.strip():
        return first, rest.strip()
    return OPERATOR, before_colon


def parse_token_lines(text: str, source: str) -> list[Token]:
    tokens = []
    for number, line in enumerate(text.splitlines(), start=1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        before, separator, secret = line.partition(":")
        if separator:
            role, name = _named(before.strip())
            token = Token(name, secret.strip(), role)
        else:
            token = Token(UNNAMED[OPERATOR], line)
        if not token.name:
            raise TokenError(f"{source} line {number}: a name before ':' must not be empty")
        tokens.append(_checked(token, f"{source} line {number}"))
    return tokens


def configured_tokens(
    operator_variable: str | None, file: Path | None, reader_variable: str | None = None
) -> list[Token]:
    """The tokens of OUTBOX_CONSOLE_TOKEN, OUTBOX_CONSOLE_READER_TOKEN and `file`."""
    tokens = []
    for variable, role, value in (
        (TOKEN_VARIABLE, OPERATOR, operator_variable),
        (READER_TOKEN_VARIABLE, READER, reader_variable),
    ):
        if value:
            tokens.append(_checked(Token(UNNAMED[role], value.strip(), role), variable))
    if file is not None:
        try:
            text = file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as error:
            raise TokenError(f"cannot read the token file {str(file)!r}: {error}") from None
        tokens += parse_token_lines(text, f"token file {str(file)!r}")
    return tokens


def token_holder(tokens: list[Token], offered: str) -> Token | None:
    """The token `offered` is, or None; every token is compared, in constant time each."""
    offered_bytes = offered.encode("utf-8", "surrogatepass")
    holder = None
    for token in tokens:
        if hmac.compare_digest(token.secret.encode(), offered_bytes) and holder is None:
            holder = token
    return holder
