"""Least-privilege roles: <prefix>_writer, <prefix>_poller and <prefix>_reader.

- writer: appends, nothing else. It may insert only the columns an append names (so it can
  neither forge a transaction id nor backdate a message) and read only position, publication
  and message id, which the idempotent append's lookup of a repeated message_id needs: column
  privileges, so the append runs the very same statements, as fast as before.
- poller: reads messages, moves checkpoints, parks messages, takes leases, records its runtime.
  It may not create, seek or delete subscriptions, nor delete messages, nor change any table.
- reader: the inspection views and the parked messages.

Roles are cluster-wide: a role that exists already (another database of the cluster was
migrated, perhaps at this very moment) is reused. Grants are made on the tables themselves, so
they hold for a partitioned table's partitions too: PostgreSQL checks privileges on the table
a query names, not on the partitions it reaches. Partitions are created and dropped by
functions that run as the owner (SECURITY DEFINER), so no default privileges are needed, and a
later migration that adds a table grants what it needs itself. The downgrade revokes in this
database and leaves the roles: other databases, and grants of them to login users, may still
use them (drop them by hand once no database does).

The prefix comes from the transaction's `outbox.role_prefix` setting (outbox.roles), default
`outbox`. sql/schema.sql runs the same block.

Revision ID: 0007
Revises: 0006
"""

from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

GRANT_ROLES = """
DO $roles$
DECLARE
    prefix text := coalesce(nullif(current_setting('outbox.role_prefix', true), ''), 'outbox');
    writer text := prefix || '_writer';
    poller text := prefix || '_poller';
    reader text := prefix || '_reader';
    role_name text;
BEGIN
    FOREACH role_name IN ARRAY ARRAY[writer, poller, reader] LOOP
        IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = role_name) THEN
            BEGIN
                EXECUTE format('CREATE ROLE %I NOLOGIN', role_name);
            EXCEPTION WHEN duplicate_object OR unique_violation THEN
                -- Another database of the cluster created it after our check: a concurrent
                -- CREATE ROLE waits for the first to commit, then fails on pg_authid's key.
                NULL;
            END;
        END IF;
    END LOOP;
    EXECUTE format('GRANT USAGE ON SCHEMA outbox TO %I, %I, %I', writer, poller, reader);
    EXECUTE format(
        'GRANT INSERT (publication_id, message_id, message_type, partition_key, data, headers),'
        ' SELECT (position, publication_id, message_id) ON outbox.messages TO %I', writer);
    EXECUTE format(
        'GRANT SELECT ON outbox.messages, outbox.subscriptions, outbox.subscription_leaders,'
        ' outbox.parked_messages, outbox.subscription_status, outbox.blocking_transactions'
        ' TO %I', poller);
    EXECUTE format(
        'GRANT UPDATE (last_processed_transaction_id, last_processed_position, updated_at)'
        ' ON outbox.subscriptions TO %I', poller);
    EXECUTE format(
        'GRANT INSERT, UPDATE, DELETE ON outbox.subscription_leaders, outbox.parked_messages'
        ' TO %I', poller);
    EXECUTE format(
        'GRANT SELECT ON outbox.subscription_status, outbox.blocking_transactions,'
        ' outbox.parked_messages TO %I', reader);
    -- A consumer that stores its own position (outbox.consumer_positions, where present).
    IF to_regclass('outbox.consumer_positions') IS NOT NULL THEN
        EXECUTE format(
            'GRANT SELECT, INSERT, UPDATE, DELETE ON outbox.consumer_positions TO %I', poller);
    END IF;
END
$roles$
"""

REVOKE_ROLES = """
DO $roles$
DECLARE
    prefix text := coalesce(nullif(current_setting('outbox.role_prefix', true), ''), 'outbox');
    role_name text;
BEGIN
    FOREACH role_name IN ARRAY ARRAY[prefix || '_writer', prefix || '_poller', prefix || '_reader']
    LOOP
        CONTINUE WHEN NOT EXISTS (SELECT FROM pg_roles WHERE rolname = role_name);
        -- Revoking a table's privileges revokes its column privileges as well.
        EXECUTE format('REVOKE ALL ON ALL TABLES IN SCHEMA outbox FROM %I', role_name);
        EXECUTE format('REVOKE ALL ON SCHEMA outbox FROM %I', role_name);
    END LOOP;
END
$roles$
"""


def upgrade() -> None:
    op.execute(GRANT_ROLES)


def downgrade() -> None:
    op.execute(REVOKE_ROLES)
