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
    """Say which brokers answered, so the output shows which relay tests could run."""
    lines = []
    for name, host, port in (brokers.NATS, brokers.REDIS, brokers.RABBITMQ):
        state = "answered" if brokers.answers(host, port) else "absent: its relay tests skip"
        lines.append(f"{name} on {host}:{port} {state}")
    terminalreporter.write_line("brokers for the relay tests: " + "; ".join(lines))
