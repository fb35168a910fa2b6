"""Serving the console with uvicorn: on localhost unless told otherwise, trusting the
forwarded headers (X-Forwarded-For, X-Forwarded-Proto) of the proxies named, under the path
prefix a reverse proxy gives it."""

import logging

import uvicorn

from outbox_console.app import create_app
from outbox_console.config import ConsoleConfig

log = logging.getLogger(__name__)


def serve(
    config: ConsoleConfig,
    host: str,
    port: int,
    *,
    root_path: str = "",
    forwarded_allow_ips: str = "127.0.0.1",
) -> None:
    """Serve until SIGTERM or SIGINT."""
    access = "read-only (no token configured)" if not config.tokens else "actions need a token"
    log.info("serving the outbox console on http://%s:%d%s/ (%s)", host, port, root_path, access)
    uvicorn.run(
        create_app(config),
        host=host,
        port=port,
        root_path=root_path,
        proxy_headers=True,
        forwarded_allow_ips=forwarded_allow_ips,
        # The process's logging (outbox's format, password masking) stays in charge.
        log_config=None,
        access_log=False,
        # A browser's polling request is short: a stop waits for them at most this long.
        timeout_graceful_shutdown=3,
    )
