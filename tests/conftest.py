from collections.abc import Iterator

import pytest

from tests.support import brokers
from tests.support.databases import DatabaseFactory, server_url


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


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Say which brokers the relay tests ran against, and which they skipped, and why."""
    lines = []
    for name, host, port in (brokers.NATS, brokers.REDIS, brokers.RABBITMQ):
        state = "answered: its tests ran" if brokers.answers(host, port) else "absent: skipped"
        lines.append(f"{name} on {host}:{port} {state}")
    terminalreporter.write_line("brokers for the relay tests: " + "; ".join(lines))
