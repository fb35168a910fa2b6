"""Serving the console with uvicorn: on localhost unless told otherwise, answering only to the
names it was given (hosts.py), trusting the forwarded headers (X-Forwarded-For,
X-Forwarded-Proto) of the proxies named and nobody's else, under the path prefix a reverse
proxy gives it."""

import logging

import uvicorn

from outbox_console.app import create_app
from outbox_console.config import ConsoleConfig
from outbox_console.tokens import OPERATOR, READER

log = logging.getLogger(__name__)


def access_text(config: ConsoleConfig) -> str:
    roles = [token.role for token in config.tokens]
    if not roles:
        return "no token: visitors see where subscriptions stand, no message, and nobody acts"
    return (
        f"{roles.count(OPERATOR)} operator token(s) may act, {roles.count(READER)} reader"
        " token(s) may read messages; without signing in, only where subscriptions stand"
    )


def serve(config: ConsoleConfig, host: str, port: int, *, root_path: str = "") -> None:
    """Serve until SIGTERM or SIGINT."""
    log.info(
        "serving the outbox console on http://%s:%d%s/ to the hosts %s (%s)",
        host,
        port,
        root_path,
        ", ".join(sorted(config.allowed_hosts)),
        access_text(config),
    )
    uvicorn.run(
        create_app(config),
        host=host,
        port=port,
        root_path=root_path,
        # The application believes forwarded headers from config.forwarded_allow_ips alone
        # (app.py); uvicorn's own default would believe any process on 127.0.0.1.
        proxy_headers=False,
        # The process's logging (outbox's format, password masking) stays in charge.
        log_config=None,
        access_log=False,
        # A browser's polling request is short: a stop waits for them at most this long.
        timeout_graceful_shutdown=3,
    )
