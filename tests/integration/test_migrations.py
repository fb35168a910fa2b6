"""The migration chain and sql/schema.sql build the same outbox, and alembic stays in its lane."""

from typing import Any

import psycopg

from outbox.queries import sql_directory
from poller.database import migrations
from tests.support.databases import DatabaseFactory

CATALOG_QUERIES = {
    "columns": """
        SELECT table_name, column_name, data_type, is_nullable, column_default, is_identity
        FROM information_schema.columns WHERE table_schema = 'outbox'
          AND table_name <> 'alembic_version' ORDER BY 1, 2""",
    "constraints": """
        SELECT conrelid::regclass::text, conname, pg_get_constraintdef(oid)
        FROM pg_constraint WHERE connamespace = 'outbox'::regnamespace
          AND conrelid::regclass::text <> 'outbox.alembic_version' ORDER BY 1, 2""",
    "indexes": """
        SELECT tablename, indexname, indexdef FROM pg_indexes
        WHERE schemaname = 'outbox' AND tablename <> 'alembic_version' ORDER BY 1, 2""",
    "views": """
        SELECT viewname, pg_get_viewdef(format('%I.%I', schemaname, viewname)::regclass)
        FROM pg_views WHERE schemaname = 'outbox' ORDER BY 1""",
    "functions": """
        SELECT proname, pg_get_functiondef(oid) FROM pg_proc
        WHERE pronamespace = 'outbox'::regnamespace ORDER BY 1""",
    "triggers": """
        SELECT tgrelid::regclass::text, tgname, pg_get_triggerdef(oid) FROM pg_trigger
        WHERE NOT tgisinternal AND tgrelid::regclass::text LIKE 'outbox.%' ORDER BY 1, 2""",
}


def catalog(url: str) -> dict[str, list[tuple[Any, ...]]]:
    with psycopg.connect(url) as conn:
        return {name: conn.execute(query).fetchall() for name, query in CATALOG_QUERIES.items()}


def test_schema_sql_builds_the_same_catalog_as_the_migrations(
    database_factory: DatabaseFactory, database_url: str
) -> None:
    from_schema = database_factory.create(migrated=False)
    try:
        with psycopg.connect(from_schema, autocommit=True) as conn:
            conn.execute((sql_directory() / "schema.sql").read_text())  # type: ignore[arg-type]
        migrated, built = catalog(database_url), catalog(from_schema)
        assert migrated["columns"], "the migrated database has no outbox tables"
        assert built == migrated
    finally:
        database_factory.drop(from_schema)


def test_migrate_is_idempotent_and_downgrades_to_base(database_url: str) -> None:
    migrations.upgrade(database_url)
    head = migrations.current_revision(database_url)
    assert head is not None
    migrations.downgrade(database_url, "base")
    assert migrations.current_revision(database_url) is None
    assert catalog(database_url)["columns"] == []
    migrations.upgrade(database_url)
    assert migrations.current_revision(database_url) == head


def test_the_version_table_lives_in_the_outbox_schema(database_url: str) -> None:
    with psycopg.connect(database_url) as conn:
        tables = conn.execute(
            "SELECT table_schema FROM information_schema.tables"
            " WHERE table_name = 'alembic_version'"
        ).fetchall()
    assert tables == [("outbox",)]
