"""outbox.blocking_transactions shows the start of a blocking session's SQL with its password
literals redacted: whoever reads it (`outbox status --show-query`, an operator's SQL) never
sees a password another session set or connected with."""

import psycopg
import pytest

SECRET = "s3cret-Literal"

# A session's last statement, and what the view shows of it.
STATEMENTS = [
    pytest.param(
        f"ALTER ROLE {{role}} PASSWORD '{SECRET}'",
        "ALTER ROLE {role} PASSWORD ***",
        id="alter-role",
    ),
    pytest.param(
        f"ALTER ROLE {{role}} WITH ENCRYPTED\n password E'{SECRET}'",
        "ALTER ROLE {role} WITH ENCRYPTED\n password ***",
        id="encrypted-across-lines",
    ),
    pytest.param(
        f"SELECT 'host=db port=5432 PassWord = {SECRET} dbname=app'",
        "SELECT 'host=db port=5432 PassWord ***",
        id="conninfo",
    ),
    pytest.param(
        f"SELECT 'postgresql://app:{SECRET}@db:5432/app', 'https://example.com/a:b@c'",
        "SELECT 'postgresql://app:***@db:5432/app', 'https://example.com/a:b@c'",
        id="url-user-info",
    ),
    pytest.param("SELECT 'nothing to hide'", "SELECT 'nothing to hide'", id="plain"),
]


@pytest.mark.parametrize(("statement", "shown"), STATEMENTS)
def test_password_literals_are_redacted(database_url: str, statement: str, shown: str) -> None:
    role = "blocking_queries_role"
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(f"DROP ROLE IF EXISTS {role}")
        conn.execute(f"CREATE ROLE {role}")
    try:
        with psycopg.connect(database_url) as blocker:
            blocker.execute("SELECT pg_current_xact_id()")  # holds an xid: a blocker
            blocker.execute(statement.format(role=role))
            with psycopg.connect(database_url) as observer:
                row = observer.execute(
                    "SELECT query_start FROM outbox.blocking_transactions WHERE pid = %s",
                    (blocker.info.backend_pid,),
                ).fetchone()
            blocker.rollback()
    finally:
        with psycopg.connect(database_url, autocommit=True) as conn:
            conn.execute(f"DROP ROLE {role}")
    assert row == (shown.format(role=role),)
