import os
from collections.abc import Iterator

import pytest

from tests.support import brokers
from tests.support.databases import PROJECT_ROOT, DatabaseFactory, server_in_use, server_url
from tests.support.replica_pair import ReplicaPair, ReplicaPairUnavailableError, binaries
from tests.support.replica_pair import replica_pair as start_replica_pair

# The suite starts hundreds of Python processes (`outbox` commands, daemons, relays, bench
# runs), each importing psycopg, pydantic, the CLI and the daemon. Under
# PYTHONDONTWRITEBYTECODE (set in this machine's environment) nothing is ever cached, so
# every process compiled all of that from source again: 1.4 s per `outbox --help` instead of
# 0.6, 2.2 s per daemon start instead of 0.9, on two cores shared with the daemons under
# test. The children then write and reuse bytecode in a cache of their own under .outbox/
# (ignored by git), not in the source tree; the code they run is the same (a cached file is
# used only while its source's mtime and size match).
if os.environ.pop("PYTHONDONTWRITEBYTECODE", None):
    os.environ.setdefault("PYTHONPYCACHEPREFIX", str(PROJECT_ROOT / ".outbox" / "pycache"))


@pytest.fixture(scope="session")
def database_server() -> Iterator[str]:
    with server_url() as url:
        yield url


@pytest.fixture(scope="session")
def database_factory(database_server: str) -> Iterator[DatabaseFactory]:
    factory = DatabaseFactory(database_server)
    yield factory
    factory.close()


@pytest.fixture
def database_url(database_factory: DatabaseFactory) -> Iterator[str]:
    """A fresh, migrated database for this test alone."""
    url = database_factory.create()
    yield url
    database_factory.drop(url)


@pytest.fixture(scope="session")
def replica_pair() -> Iterator[ReplicaPair]:
    """A primary and a hot standby streaming from it, the session's own whatever server the
    other tests use (tests/support/replica_pair.py); each test makes a database on it."""
    try:
        binaries()
    except ReplicaPairUnavailableError as error:
        pytest.skip(str(error))
    with start_replica_pair() as pair:
        yield pair


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Say which database the tests used and which brokers answered, so the output shows
    which server the database tests passed on and which relay tests could run."""
    terminalreporter.write_line(f"database: {server_in_use() or 'none (no test here used one)'}")
    lines = []
    for name, host, port in (brokers.NATS, brokers.REDIS, brokers.RABBITMQ):
        state = "answered" if brokers.answers(host, port) else "absent: its relay tests skip"
        lines.append(f"{name} on {host}:{port} {state}")
    terminalreporter.write_line("brokers for the relay tests: " + "; ".join(lines))
