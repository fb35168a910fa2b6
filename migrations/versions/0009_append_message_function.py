"""An append with an explicit message_id in one round trip: outbox.append_message.

Since 0006 such an append took two statements, a transaction-level advisory lock on the id and
then the lookup and insert, because the lookup has to run with a snapshot taken after the lock.
A PL/pgSQL function runs each of its statements with a fresh snapshot (under READ COMMITTED),
so the three fit one call and the duplicate guarantee stays as it was.

Revision ID: 0009
Revises: 0008
"""

from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
-- An append with an explicit message_id in one round trip (migration 0009): the lock, then the
-- lookup, then the insert. PL/pgSQL gives each statement a fresh snapshot under READ COMMITTED,
-- so the lookup after the lock sees a duplicate committed while this transaction waited for it;
-- one statement taking the lock in a CTE would look with the snapshot it started with. The key
-- is lock_message_ids' (in sql/queries.sql), so single and batch appends exclude each other.
CREATE FUNCTION outbox.append_message(
    publication text,
    message_id text,
    message_type text,
    partition_key text,
    data jsonb,
    headers jsonb
) RETURNS bigint
LANGUAGE plpgsql
AS $function$
DECLARE
    appended bigint;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended(
        length(append_message.publication) || ':' || append_message.publication
        || append_message.message_id, 0));
    SELECT m.position INTO appended
    FROM outbox.messages AS m
    WHERE m.publication_id = append_message.publication
      AND m.message_id = append_message.message_id;
    IF appended IS NOT NULL THEN
        RETURN appended;
    END IF;
    INSERT INTO outbox.messages
        (publication_id, message_id, message_type, partition_key, data, headers)
    VALUES (append_message.publication, append_message.message_id, append_message.message_type,
            append_message.partition_key, append_message.data, append_message.headers)
    RETURNING position INTO appended;
    RETURN appended;
END
$function$;
"""
    )


def downgrade() -> None:
    op.execute("DROP FUNCTION outbox.append_message(text, text, text, text, jsonb, jsonb)")
