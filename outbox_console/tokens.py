"""Who may act: the tokens an operator signs in with.

A token comes from OUTBOX_CONSOLE_TOKEN (named "token" in the action log) or from a file of
one token a line, `NAME: SECRET` (the name is what the action log says) or a bare `SECRET`;
blank lines and lines starting with # are skipped. Offered tokens are compared with
hmac.compare_digest against every configured one, so the time taken says nothing about how
much of a secret matched, or which.
"""

import hmac
from pathlib import Path
from typing import NamedTuple

TOKEN_VARIABLE = "OUTBOX_CONSOLE_TOKEN"
UNNAMED = "token"
# Shorter secrets can be guessed through the sign-in form; `openssl rand -hex 32` gives 64.
MIN_SECRET_LENGTH = 16


class TokenError(ValueError):
    """A token file or variable that cannot be used; the message never holds a secret."""


class Token(NamedTuple):
    name: str
    secret: str


def _checked(token: Token, where: str) -> Token:
    if len(token.secret) < MIN_SECRET_LENGTH:
        raise TokenError(
            f"{where}: a token must be at least {MIN_SECRET_LENGTH} characters"
            " (`openssl rand -hex 32` makes one)"
        )
    if not token.secret.isascii() or not token.secret.isprintable() or " " in token.secret:
        raise TokenError(f"{where}: a token must be printable ASCII without spaces")
    return token


def parse_token_lines(text: str, source: str) -> list[Token]:
    tokens = []
    for number, line in enumerate(text.splitlines(), start=1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name, separator, secret = line.partition(":")
        token = Token(name.strip(), secret.strip()) if separator else Token(UNNAMED, line)
        if not token.name:
            raise TokenError(f"{source} line {number}: a name before ':' must not be empty")
        tokens.append(_checked(token, f"{source} line {number}"))
    return tokens


def configured_tokens(variable: str | None, file: Path | None) -> list[Token]:
    """The tokens of OUTBOX_CONSOLE_TOKEN (`variable`) and of `file`; none: read-only."""
    tokens = []
    if variable:
        tokens.append(_checked(Token(UNNAMED, variable.strip()), TOKEN_VARIABLE))
    if file is not None:
        try:
            text = file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as error:
            raise TokenError(f"cannot read the token file {str(file)!r}: {error}") from None
        tokens += parse_token_lines(text, f"token file {str(file)!r}")
    return tokens


def token_holder(tokens: list[Token], offered: str) -> str | None:
    """The name of the token `offered` is, or None; every token is compared, in constant
    time each."""
    offered_bytes = offered.encode("utf-8", "surrogatepass")
    holder = None
    for token in tokens:
        if hmac.compare_digest(token.secret.encode(), offered_bytes) and holder is None:
            holder = token.name
    return holder
