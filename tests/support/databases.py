"""Where the tests' PostgreSQL comes from, and a fresh database per test.

Order: OUTBOX_TEST_DATABASE_URL if set; else a testcontainers PostgreSQL when a Docker engine
answers; else the embedded PostgreSQL (kept under .outbox/test-pgdata and reused). The run's
last lines say which one it used, and its version (tests/conftest.py). Each test
gets a database cloned from a migrated template (CREATE DATABASE ... TEMPLATE), as pgqueuer
does, which takes milliseconds instead of a migration run per test. `probe` is the cheap
connection tests poll that database through.
"""

import contextlib
import os
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from outbox import schema_migrations as migrations

PROJECT_ROOT = Path(__file__).resolve().parents[2]


def with_database(url: str, dbname: str) -> str:
    return make_conninfo(url, dbname=dbname)


def database_name(url: str) -> str:
    return str(conninfo_to_dict(url).get("dbname", "postgres"))


# One autocommit connection per database and thread for the many small polling queries: a
# new connection per poll would fork a backend every 20 ms and load the machine under test.
_probes = threading.local()


def probe(url: str) -> psycopg.Connection[Any]:
    connections: dict[str, psycopg.Connection[Any]] = _probes.__dict__.setdefault("by_url", {})
    conn = connections.get(url)
    if conn is None or conn.closed:
        conn = psycopg.connect(url, autocommit=True, application_name="outbox-test-probe")
        connections[url] = conn
    return conn


def close_probe(url: str) -> None:
    connections: dict[str, psycopg.Connection[Any]] = _probes.__dict__.get("by_url", {})
    conn = connections.pop(url, None)
    if conn is not None:
        conn.close()


def _docker_answers() -> bool:
    try:
        import docker  # type: ignore[import-untyped]

        docker.from_env(timeout=2).ping()
    except Exception:  # any failure means "no engine here"; the embedded server takes over
        return False
    return True


_server_in_use: list[str] = []


def server_in_use() -> str | None:
    """Which PostgreSQL the tests used, in words (no password); None before one is started."""
    return _server_in_use[0] if _server_in_use else None


def _said(url: str, source: Callable[[str], str]) -> str:
    """`url`, its server kept said as `source` says it, given the server's version."""
    with psycopg.connect(url) as conn:
        number = conn.info.server_version
    _server_in_use[:] = [source(f"{number // 10000}.{number % 10000}")]
    return url


@contextlib.contextmanager
def server_url() -> Iterator[str]:
    configured = os.environ.get("OUTBOX_TEST_DATABASE_URL")
    if configured:
        address = server_address(configured)
        where = address if isinstance(address, str) else "{}:{}".format(*address)
        yield _said(configured, lambda version: f"PostgreSQL {version} service at {where}")
        return
    if _docker_answers():
        from testcontainers.postgres import PostgresContainer

        with PostgresContainer("postgres:18", driver=None) as container:
            yield _said(
                container.get_connection_url(),
                lambda version: f"testcontainers (PostgreSQL {version})",
            )
        return
    from outbox_cli.embedded_server import embedded_database_url

    url = embedded_database_url(PROJECT_ROOT / ".outbox" / "test")
    with psycopg.connect(url, autocommit=True) as conn:
        # A throwaway cluster: durability buys nothing and costs seconds per test run.
        conn.execute("ALTER SYSTEM SET fsync = off")
        conn.execute("ALTER SYSTEM SET synchronous_commit = off")
        conn.execute("ALTER SYSTEM SET full_page_writes = off")
        conn.execute("SELECT pg_reload_conf()")
    yield _said(url, lambda version: f"embedded PostgreSQL {version}")


class DatabaseFactory:
    """Clones fresh databases from one migrated template on the test server."""

    def __init__(self, server: str) -> None:
        self.server = server
        self.template = f"outbox_template_{os.getpid()}"
        self._admin = psycopg.connect(server, autocommit=True)
        self._drop(self.template)
        self._admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(self.template)))
        migrations.upgrade(with_database(server, self.template))

    def create(self, *, migrated: bool = True) -> str:
        name = f"outbox_test_{uuid.uuid4().hex[:12]}"
        template = self.template if migrated else "template0"
        self._admin.execute(
            sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
                sql.Identifier(name), sql.Identifier(template)
            )
        )
        return with_database(self.server, name)

    def drop(self, url: str) -> None:
        self._drop(database_name(url))

    def _drop(self, name: str) -> None:
        self._admin.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )

    def close(self) -> None:
        self._drop(self.template)
        self._admin.close()


def server_address(url: str) -> tuple[str, int] | str:
    """Where the server of `url` listens: a host and port, or its Unix socket's path."""
    params = conninfo_to_dict(url)
    host = str(params.get("host") or "/tmp")
    port = int(params.get("port") or 5432)
    return f"{host}/.s.PGSQL.{port}" if host.startswith("/") else (host, port)


def through_port(url: str, port: int) -> str:
    """`url`, reaching its server through 127.0.0.1:`port` (a tests.support.tcp_proxy)."""
    params = conninfo_to_dict(url)
    params.pop("hostaddr", None)
    return make_conninfo("", **{**params, "host": "127.0.0.1", "port": str(port)})
