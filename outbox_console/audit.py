"""The action log: one line per action an operator took or tried, at INFO when it was done
and at WARNING when it was refused, saying who (the token's name), what, and the outcome. It
never holds a token or a CSRF token."""

import logging

log = logging.getLogger("outbox_console.actions")


def done(who: str, what: str, outcome: str) -> None:
    log.info("console action by %s: %s: %s", who, what, outcome)


def refused(who: str | None, what: str, reason: str, client: str) -> None:
    log.warning(
        "console action refused: %s by %s from %s: %s",
        what,
        who or "nobody signed in",
        client,
        reason,
    )
