"""alembic environment: always run through outbox.schema_migrations with a live connection."""

from alembic import context

from outbox.schema_migrations import VERSION_TABLE_SCHEMA

connection = context.config.attributes["connection"]
context.configure(
    connection=connection,
    version_table_schema=VERSION_TABLE_SCHEMA,
    transactional_ddl=True,
)
with context.begin_transaction():
    context.run_migrations()
