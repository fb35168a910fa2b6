"""Login users that are members of the outbox roles, the way a deployment grants them.

Roles are cluster-wide while each test has its own database, so every login gets a fresh name
and is dropped when its test ends; it may connect only to its own test database.
"""

import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo

from tests.support.databases import database_name


@contextmanager
def login_as(database_url: str, role: str) -> Iterator[str]:
    """The URL of a new LOGIN user that is a member of `role` (nothing more), for this test."""
    user = f"outbox_test_login_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(database_url, autocommit=True) as admin:
        admin.execute(
            sql.SQL("CREATE ROLE {} LOGIN PASSWORD 'test' IN ROLE {}").format(
                sql.Identifier(user), sql.Identifier(role)
            )
        )
        admin.execute(
            sql.SQL("GRANT CONNECT ON DATABASE {} TO {}").format(
                sql.Identifier(database_name(database_url)), sql.Identifier(user)
            )
        )
    try:
        yield make_conninfo(database_url, user=user, password="test")
    finally:
        with psycopg.connect(database_url, autocommit=True) as admin:
            # Its sessions first (a daemon's last connection may still be closing).
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s",
                [user],
            )
            admin.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(user)))
            admin.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(user)))
