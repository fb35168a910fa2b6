"""Retention holds a sharded subscription's messages at its lowest shard checkpoint, not only
at the floor its shards' leaders write into its own row: a floor raise that waited behind a
seek wrote the floor from before the seek, above the shards the seek moved back, and
`outbox prune` retired messages they had yet to deliver (the statements are fixed too; this
keeps any floor that is late or wrong from costing a message).

Revision ID: 0015
Revises: 0014
"""

from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

HOLDER = """
-- What keeps the partition taking [first_position, end_position) from being retired, the
-- first reason found (no row: nothing): 'unfilled' (positions still to be handed out),
-- 'subscription' or 'spark' (a subscription whose checkpoint, or one of whose shards'
-- checkpoints, has not passed one of its messages there), 'consumer' (an
-- outbox.consumer_positions row behind one of them), 'parked' (a parked message there),
-- 'minimum age' (a message appended less than minimum_age ago; not checked when minimum_age is
-- null). held_since: when the oldest message held was appended (the parking time for 'parked',
-- the newest message's for 'minimum age').
CREATE OR REPLACE FUNCTION outbox.message_partition_holder(
    first_position bigint, end_position bigint, minimum_age interval)
RETURNS TABLE (kind text, holder text, held_since timestamptz)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    newest timestamptz;
BEGIN
    IF end_position > outbox.next_message_position() THEN
        RETURN QUERY SELECT 'unfilled'::text, NULL::text, NULL::timestamptz;
        RETURN;
    END IF;
    RETURN QUERY
    SELECT CASE WHEN s.settings ->> 'kind' = 'spark' THEN 'spark' ELSE 'subscription' END,
           s.subscription_id, first_held.appended_at
    FROM outbox.subscriptions AS s,
{held_at}         LATERAL (SELECT m.appended_at FROM outbox.messages AS m
                  WHERE m.publication_id = s.publication_id
                    AND (m.transaction_id, m.position) > (held_at.transaction_id, held_at.position)
                    AND m.position >= first_position AND m.position < end_position
                  ORDER BY m.transaction_id, m.position LIMIT 1) AS first_held
    ORDER BY first_held.appended_at, s.subscription_id
    LIMIT 1;
    IF FOUND THEN
        RETURN;
    END IF;
    -- Added by a later migration, if at all: read through its row as JSON, so that neither
    -- its absence nor its exact columns break retention.
    IF to_regclass('outbox.consumer_positions') IS NOT NULL THEN
        RETURN QUERY EXECUTE
        'SELECT ''consumer''::text, coalesce(c.row ->> ''consumer_name'', c.row ->> ''consumer'',
                                             c.row::text), first_held.appended_at
         FROM (SELECT to_jsonb(p) AS row, p.transaction_id, p.position
               FROM outbox.consumer_positions AS p) AS c,
              LATERAL (SELECT m.appended_at FROM outbox.messages AS m
                       WHERE (m.transaction_id, m.position) > (c.transaction_id, c.position)
                         AND (c.row ->> ''publication_id'' IS NULL
                              OR m.publication_id = c.row ->> ''publication_id'')
                         AND m.position >= $1 AND m.position < $2
                       ORDER BY m.transaction_id, m.position LIMIT 1) AS first_held
         ORDER BY first_held.appended_at LIMIT 1'
        USING first_position, end_position;
        IF FOUND THEN
            RETURN;
        END IF;
    END IF;
    RETURN QUERY
    SELECT 'parked'::text, p.subscription_id, p.parked_at
    FROM outbox.parked_messages AS p
    WHERE p.position >= first_position AND p.position < end_position
    ORDER BY p.parked_at LIMIT 1;
    IF FOUND OR minimum_age IS NULL THEN
        RETURN;
    END IF;
    -- appended_at is the writer transaction's start, so the newest position need not be the
    -- newest message: its time is only a cheap first test, the scan decides.
    SELECT m.appended_at INTO newest FROM outbox.messages AS m
    WHERE m.position >= first_position AND m.position < end_position
    ORDER BY m.position DESC LIMIT 1;
    IF newest > clock_timestamp() - minimum_age THEN
        RETURN QUERY SELECT 'minimum age'::text, NULL::text, newest;
        RETURN;
    END IF;
    SELECT max(m.appended_at) INTO newest FROM outbox.messages AS m
    WHERE m.position >= first_position AND m.position < end_position;
    IF newest > clock_timestamp() - minimum_age THEN
        RETURN QUERY SELECT 'minimum age'::text, NULL::text, newest;
    END IF;
END
$$;
"""

LOWEST_OF_FLOOR_AND_SHARDS = """\
         -- A sharded subscription's own checkpoint is its floor, which its shards' leaders
         -- raise after their own writes: held at the lowest shard checkpoint itself too, so a
         -- floor written late or wrong never lets a partition go before every shard passed it.
         LATERAL (SELECT c.transaction_id, c.position
                  FROM (SELECT s.last_processed_transaction_id, s.last_processed_position
                        UNION ALL
                        SELECT sh.last_processed_transaction_id, sh.last_processed_position
                        FROM outbox.subscription_shards AS sh
                        WHERE sh.subscription_id = s.subscription_id)
                       AS c (transaction_id, position)
                  ORDER BY c.transaction_id, c.position LIMIT 1) AS held_at,
"""

FLOOR_ONLY = """\
         LATERAL (SELECT s.last_processed_transaction_id, s.last_processed_position)
              AS held_at (transaction_id, position),
"""


def upgrade() -> None:
    op.execute(HOLDER.format(held_at=LOWEST_OF_FLOOR_AND_SHARDS))


def downgrade() -> None:
    op.execute(HOLDER.format(held_at=FLOOR_ONLY))
