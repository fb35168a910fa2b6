"""alembic environment: always run through poller.database.migrations with a live connection."""

from alembic import context

from poller.database.migrations import VERSION_TABLE_SCHEMA

connection = context.config.attributes["connection"]
context.configure(
    connection=connection,
    version_table_schema=VERSION_TABLE_SCHEMA,
    transactional_ddl=True,
)
with context.begin_transaction():
    context.run_migrations()
