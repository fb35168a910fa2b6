"""The migration chain and sql/schema.sql build the same outbox, and alembic stays in its lane."""

import datetime
import shutil
import subprocess

import psycopg
import pytest
from psycopg import sql

from outbox import schema_migrations as migrations
from outbox.queries import sql_directory
from tests.support.databases import DatabaseFactory


def catalog(url: str) -> migrations.Catalog:
    with psycopg.connect(url) as conn:
        return {
            kind: dict(conn.execute(query).fetchall())
            for kind, query in migrations.CATALOG_QUERIES.items()
        }


def test_schema_sql_builds_the_same_catalog_as_the_migrations(
    database_factory: DatabaseFactory, database_url: str
) -> None:
    from_schema = database_factory.create(migrated=False)
    try:
        with psycopg.connect(from_schema, autocommit=True) as conn:
            conn.execute((sql_directory() / "schema.sql").read_text())
        migrated, built = catalog(database_url), catalog(from_schema)
        assert migrated["column"], "the migrated database has no outbox tables"
        assert built == migrated
    finally:
        database_factory.drop(from_schema)


@pytest.mark.parametrize(
    "psql_options",
    [pytest.param([], id="plain"), pytest.param(["-v", "ON_ERROR_STOP=1"], id="stop")],
)
def test_schema_sql_run_by_hand_over_a_conflicting_table_creates_nothing(
    database_factory: DatabaseFactory, psql_options: list[str]
) -> None:
    if shutil.which("psql") is None:
        pytest.skip("no psql client")
    url = database_factory.create(migrated=False)
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            # Created by hand before the DBA ran the file: schema.sql gets halfway to it.
            conn.execute("CREATE SCHEMA outbox; CREATE TABLE outbox.parked_messages (note text)")
        psql = [
            "psql",
            "-X",
            "-q",
            "-d",
            url,
            *psql_options,
            "-f",
            str(sql_directory() / "schema.sql"),
        ]
        done = subprocess.run(psql, capture_output=True, text=True, timeout=60, check=False)
        assert "already exists" in done.stderr
        with psycopg.connect(url) as conn:
            created = conn.execute(
                "SELECT relname FROM pg_class WHERE relnamespace = 'outbox'::regnamespace"
                " AND relkind = 'r' ORDER BY 1"
            ).fetchall()
        assert created == [("parked_messages",)]
    finally:
        database_factory.drop(url)


def _schemas(url: str) -> list[tuple[str]]:
    with psycopg.connect(url) as conn:
        return conn.execute(
            "SELECT nspname::text FROM pg_namespace WHERE nspname LIKE 'outbox%' ORDER BY 1"
        ).fetchall()


def test_a_database_built_from_schema_sql_is_adopted_at_head_as_it_stands(
    database_factory: DatabaseFactory, database_url: str
) -> None:
    url = database_factory.create(migrated=False)
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute((sql_directory() / "schema.sql").read_text())
        built = catalog(url)
        migrations.upgrade(url)
        assert migrations.current_revision(url) == migrations.current_revision(database_url)
        assert catalog(url) == built
        assert _schemas(url) == [("outbox",)]  # the scratch build of head left nothing behind
    finally:
        database_factory.drop(url)


def test_an_older_outbox_without_history_is_refused_and_left_as_it_was(
    database_factory: DatabaseFactory,
) -> None:
    url = database_factory.create(migrated=False)
    try:
        migrations.upgrade(url, "0002")
        with psycopg.connect(url) as conn:
            conn.execute("DROP TABLE outbox.alembic_version")
        before = catalog(url)
        # The first difference found is named (which one depends on the later migrations).
        with pytest.raises(
            migrations.SchemaMismatchError,
            match=r"is not revision \d+ \(head\).*column \S+ is missing",
        ):
            migrations.upgrade(url)
        assert catalog(url) == before
        assert migrations.current_revision(url) is None
        assert _schemas(url) == [("outbox",)]
    finally:
        database_factory.drop(url)


def test_migrate_is_idempotent_and_downgrades_to_base(database_url: str) -> None:
    migrations.upgrade(database_url)
    head = migrations.current_revision(database_url)
    assert head is not None
    migrations.downgrade(database_url, "base")
    assert migrations.current_revision(database_url) is None
    assert catalog(database_url)["column"] == {}
    migrations.upgrade(database_url)
    assert migrations.current_revision(database_url) == head


def test_the_version_table_lives_in_the_outbox_schema(database_url: str) -> None:
    with psycopg.connect(database_url) as conn:
        tables = conn.execute(
            "SELECT table_schema FROM information_schema.tables"
            " WHERE table_name = 'alembic_version'"
        ).fetchall()
    assert tables == [("outbox",)]


def _appended_times(url: str, column: str) -> list[tuple[str, datetime.datetime]]:
    with psycopg.connect(url) as conn:
        query = sql.SQL("SELECT message_id, {} FROM outbox.messages ORDER BY position")
        return conn.execute(query.format(sql.Identifier(column))).fetchall()


def _oldest_undelivered_age(url: str) -> datetime.timedelta:
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT oldest_undelivered_age FROM outbox.subscription_status"
            " WHERE subscription_id = 'billing'"
        ).fetchone()
    assert row is not None
    age: datetime.timedelta = row[0]
    return age


def test_renaming_scheduled_to_appended_at_keeps_the_rows_both_ways(
    database_factory: DatabaseFactory,
) -> None:
    url = database_factory.create(migrated=False)
    try:
        migrations.upgrade(url, "0003")
        at_0003 = catalog(url)
        # Times far enough apart that the view's age tells which one it took as the oldest.
        times = [
            datetime.datetime(2020, 1, 1, 12, 0, 0, 123456, tzinfo=datetime.UTC),
            datetime.datetime(2021, 6, 1, 0, 0, tzinfo=datetime.UTC),
        ]
        with psycopg.connect(url) as conn:
            conn.execute(
                "INSERT INTO outbox.subscriptions (subscription_id, publication_id)"
                " VALUES ('billing', 'orders')"
            )
            for n, scheduled in enumerate(times):
                conn.execute(
                    "INSERT INTO outbox.messages"
                    " (publication_id, message_id, message_type, data, scheduled)"
                    " VALUES ('orders', %s, 'OrderPlaced', '{}', %s)",
                    [f"m-{n}", scheduled],
                )
        rows = [(f"m-{n}", scheduled) for n, scheduled in enumerate(times)]
        assert _appended_times(url, "scheduled") == rows

        migrations.upgrade(url)
        assert _appended_times(url, "appended_at") == rows
        # The status view still ages the oldest undelivered message, now by appended_at.
        now = datetime.datetime.now(datetime.UTC)
        assert abs(_oldest_undelivered_age(url) - (now - times[0])) < datetime.timedelta(hours=1)

        migrations.downgrade(url, "0003")
        assert _appended_times(url, "scheduled") == rows
        assert abs(_oldest_undelivered_age(url) - (now - times[0])) < datetime.timedelta(hours=1)
        assert catalog(url) == at_0003
    finally:
        database_factory.drop(url)
