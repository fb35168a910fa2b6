"""Running the alembic chain in migrations/ from code and from `outbox migrate`.

The version table lives in the `outbox` schema (as advanced-alchemy does), so our history
never collides with the host application's own alembic_version.
"""

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Connection, NullPool, create_engine, text

import outbox

VERSION_TABLE_SCHEMA = "outbox"


def migrations_directory() -> Path:
    packaged = Path(outbox.__file__).parent / "migrations"
    if packaged.is_dir():
        return packaged
    return Path(outbox.__file__).resolve().parent.parent / "migrations"


@contextmanager
def _migration_connection(database_url: str) -> Iterator[tuple[Config, Connection]]:
    # The creator hands the URL to psycopg untouched, so socket paths and options in it work
    # exactly as they do for every other connection the product makes.
    engine = create_engine(
        "postgresql+psycopg://", creator=lambda: psycopg.connect(database_url), poolclass=NullPool
    )
    try:
        with engine.begin() as connection:
            # Two processes migrating at once would both try to create the same tables.
            connection.execute(text("SELECT pg_advisory_xact_lock(hashtext('outbox.migrate'))"))
            connection.execute(text(f"CREATE SCHEMA IF NOT EXISTS {VERSION_TABLE_SCHEMA}"))
            config = Config()
            config.set_main_option("script_location", str(migrations_directory()))
            config.attributes["connection"] = connection
            yield config, connection
    finally:
        engine.dispose()


def upgrade(database_url: str, revision: str = "head") -> None:
    with _migration_connection(database_url) as (config, _):
        command.upgrade(config, revision)


def downgrade(database_url: str, revision: str = "base") -> None:
    with _migration_connection(database_url) as (config, _):
        command.downgrade(config, revision)


def current_revision(database_url: str) -> str | None:
    with _migration_connection(database_url) as (_, connection):
        context = MigrationContext.configure(
            connection, opts={"version_table_schema": VERSION_TABLE_SCHEMA}
        )
        return context.get_current_revision()
