"""Broker servers of a test's own, on a free port, for tests that kill, restart or configure
a broker (never the machine's shared services)."""

import contextlib
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.brokers import answers


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextlib.contextmanager
def own_server(binary: str, arguments: list[str], port: int) -> Iterator[subprocess.Popen[bytes]]:
    """Run `binary` with `arguments` until it answers on `port`; stop it after."""
    path = shutil.which(binary)
    if path is None:
        pytest.skip(f"{binary} is not installed")
    server = subprocess.Popen(
        [path, *arguments], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        deadline = time.monotonic() + 10
        while not answers("127.0.0.1", port):
            assert server.poll() is None, f"{binary} exited with {server.returncode}"
            assert time.monotonic() < deadline, f"{binary} did not start"
            time.sleep(0.02)
        yield server
    finally:
        server.terminate()
        server.wait(10)


@contextlib.contextmanager
def own_redis(directory: Path, *settings: str) -> Iterator[int]:
    """A redis-server of the test's own with `settings` (`--appendonly no`, ...): its port."""
    port = free_port()
    arguments = ["--port", str(port), "--bind", "127.0.0.1", "--dir", str(directory)]
    arguments += ["--save", ""]
    with own_server("redis-server", [*arguments, *settings], port):
        yield port
