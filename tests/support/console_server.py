"""`outbox console` as a real process on a free port, for the console's tests."""

import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.support.cli import outbox_environment
from tests.support.daemons import wait_until
from tests.support.databases import PROJECT_ROOT
from tests.support.own_servers import free_port

# Long enough for the sign-in form's check, never printed by the console.
TOKEN = "console-test-token-0123456789"


@dataclass
class ConsoleServer:
    process: "subprocess.Popen[bytes]"
    base_url: str
    log_path: Path

    def url(self, path: str) -> str:
        return self.base_url + path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False


@contextmanager
def console_server(
    database_url: str, log_path: Path, *options: str, token: str | None = TOKEN
) -> Iterator[ConsoleServer]:
    """`outbox console` on a free port (with OUTBOX_CONSOLE_TOKEN=`token`), until it answers;
    stopped (SIGTERM, then SIGKILL) on the way out."""
    port = free_port()
    environment = outbox_environment(database_url, OUTBOX_LOG_LEVEL="INFO")
    if token is not None:
        environment["OUTBOX_CONSOLE_TOKEN"] = token
    with log_path.open("wb") as log_file:
        process = subprocess.Popen(
            [sys.executable, "-m", "outbox_cli", "console", "--port", str(port), *options],
            stdout=log_file,
            stderr=subprocess.STDOUT,
            env=environment,
            cwd=PROJECT_ROOT,
        )
    server = ConsoleServer(process, f"http://127.0.0.1:{port}", log_path)
    try:
        wait_until(
            lambda: process.poll() is not None or _answers(server.url("/")),
            30,
            "the console to answer",
            interval=0.05,
        )
        assert process.poll() is None, f"the console exited:\n{server.log()}"
        yield server
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
