"""A batch with message_ids in one round trip: outbox.append_messages.

Until now such a batch took two statements, the advisory locks on its ids and then the lookup
and insert. On an autocommit connection each statement is a transaction of its own, so the
locks were released before the lookup, and concurrent batches of the same ids stored them
twice (in different partitions; in one, its unique index refused the second). One PL/pgSQL
call holds the locks to the end of the caller's transaction, whatever it is, and still looks
with a snapshot taken after them.

Revision ID: 0011
Revises: 0010
"""

from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
-- A batch with message_ids in one round trip (migration 0011): the locks on the given ids, in
-- key order so two batches cannot deadlock, then the lookup and the insert in one statement,
-- whose snapshot PL/pgSQL takes after the locks (one per statement under READ COMMITTED). One
-- call, so the locks hold on an autocommit connection too: taken by a statement of their own,
-- they were gone before the next one looked. A null id is a fresh UUID, neither locked nor
-- looked up. Returns the positions in the order given: an existing id's position, the first
-- row's for an id repeated in the batch. The key is outbox.append_message's.
CREATE FUNCTION outbox.append_messages(
    publication text,
    message_ids text[],
    message_types text[],
    partition_keys text[],
    data jsonb[],
    headers jsonb[]
) RETURNS bigint[]
LANGUAGE plpgsql
AS $function$
DECLARE
    positions bigint[];
BEGIN
    PERFORM pg_advisory_xact_lock(keys.lock_key)
    FROM (SELECT DISTINCT hashtextextended(
              length(append_messages.publication) || ':' || append_messages.publication
              || given.message_id, 0) AS lock_key
          FROM unnest(append_messages.message_ids) AS given(message_id)
          WHERE given.message_id IS NOT NULL
          ORDER BY lock_key) AS keys;
    WITH input AS (
        SELECT coalesce(t.message_id, gen_random_uuid()::text) AS message_id, t.message_type,
               t.partition_key, t.message_data, t.message_headers, t.ordinal
        FROM unnest(append_messages.message_ids, append_messages.message_types,
                    append_messages.partition_keys, append_messages.data,
                    append_messages.headers)
             WITH ORDINALITY AS t(message_id, message_type, partition_key, message_data,
                                  message_headers, ordinal)
    ),
    existing AS (
        SELECT m.message_id, m.position FROM outbox.messages AS m
        WHERE m.publication_id = append_messages.publication
          AND m.message_id = ANY(append_messages.message_ids)
    ),
    fresh AS (
        SELECT DISTINCT ON (input.message_id) input.*
        FROM input
        WHERE NOT EXISTS (SELECT FROM existing WHERE existing.message_id = input.message_id)
        ORDER BY input.message_id, input.ordinal
    ),
    inserted AS (
        INSERT INTO outbox.messages
            (publication_id, message_id, message_type, partition_key, data, headers)
        SELECT append_messages.publication, fresh.message_id, fresh.message_type,
               fresh.partition_key, fresh.message_data, fresh.message_headers
        FROM fresh
        ORDER BY fresh.ordinal
        RETURNING outbox.messages.message_id, outbox.messages.position
    )
    SELECT array_agg(coalesce(inserted.position, existing.position) ORDER BY input.ordinal)
    INTO positions
    FROM input
    LEFT JOIN inserted ON inserted.message_id = input.message_id
    LEFT JOIN existing ON existing.message_id = input.message_id;
    RETURN positions;
END
$function$;
"""
    )


def downgrade() -> None:
    op.execute(
        "DROP FUNCTION outbox.append_messages(text, text[], text[], text[], jsonb[], jsonb[])"
    )
