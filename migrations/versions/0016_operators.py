"""What operators were missing: replays of one parked message that wait for a leader, quiet
publications retired by age, and `outbox status` for the poller role.

- `outbox.parked_messages.replay_requested_at`: `outbox parked replay` marks the rows to
  deliver again (all of a subscription's, or one), and the leader of each row's shard replays
  the marked rows when it next renews, or when it starts leading: a replay asked while no
  daemon runs waits in the row instead of being refused. The leader deletes the row once the
  message is handled, or parks it again (clearing the mark it read).
- `outbox.close_message_partition_by_age`: retention drops whole partitions of 1M positions,
  so a publication writing a thousand messages a day kept everything for years. Once the
  first message of the partition taking the next position is older than the minimum age, the
  position identity jumps to the next partition (made ahead), and the closed one is retired
  like a full one when its holders have passed it.
- The poller role reads `outbox.retention_status`, the last thing `outbox status` reads that
  it could not.

Revision ID: 0016
Revises: 0015
"""

from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

REPLAY_REQUESTS = """
-- `outbox parked replay` marks a parked row; its shard's leader replays the marked rows at its
-- next lease renewal, or when it starts leading (0016).
ALTER TABLE outbox.parked_messages ADD COLUMN replay_requested_at timestamptz NULL;
"""

CLOSE_BY_AGE = """
-- Closes the partition that takes the next position once its first message is older than
-- minimum_age (0016): the position identity jumps to the first position of the next partition
-- (made ahead), so the closed one no longer counts as unfilled and is retired, as a partition
-- filled by size is, once every holder has passed it and its newest message is older than
-- minimum_age. Without it a publication writing a few messages a day filled a partition of 1M
-- positions in years and kept every message that long. Returns the closed partition's name,
-- or null: no message older than minimum_age there, no partition made ahead to move to, or
-- filled meanwhile. The jump waits for SHARE on outbox.messages, which every writing
-- transaction holds off until it ends (and holds new ones off until this one commits, at most
-- lock_wait: lock_not_available then, and the next pass tries again): no position is being
-- handed out while the identity moves, so it never moves back below one taken.
CREATE FUNCTION outbox.close_message_partition_by_age(minimum_age interval, lock_wait interval)
RETURNS text
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    next_position bigint;
    filling record;
    first_appended timestamptz;
BEGIN
    IF minimum_age IS NULL OR minimum_age < interval '0' THEN
        RAISE EXCEPTION 'minimum_age must be zero or more, got %', minimum_age
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- outbox.create_message_partitions' lock: the partition moved to cannot be created or
    -- counted twice meanwhile.
    PERFORM pg_advisory_xact_lock(hashtextextended('outbox.create_message_partitions', 0));
    next_position := outbox.next_message_position();
    SELECT * INTO filling FROM outbox.message_partitions() AS p
    WHERE p.first_position <= next_position AND next_position < p.end_position;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    -- The first message by position (the primary key finds it), not the oldest appended_at,
    -- which would need a scan: they differ by at most a writer transaction's length.
    SELECT m.appended_at INTO first_appended FROM outbox.messages AS m
    WHERE m.position >= filling.first_position AND m.position < filling.end_position
    ORDER BY m.position LIMIT 1;
    IF first_appended IS NULL OR first_appended > clock_timestamp() - minimum_age THEN
        RETURN NULL;
    END IF;
    IF NOT EXISTS (SELECT FROM outbox.message_partitions() AS p
                   WHERE p.first_position = filling.end_position) THEN
        RETURN NULL;
    END IF;
    PERFORM set_config('lock_timeout', (extract(epoch FROM lock_wait) * 1000)::bigint || 'ms',
                       true);
    LOCK TABLE ONLY outbox.messages IN SHARE MODE;
    IF outbox.next_message_position() >= filling.end_position THEN
        RETURN NULL;
    END IF;
    PERFORM setval(pg_get_serial_sequence('outbox.messages', 'position'),
                   filling.end_position - 1);
    RETURN filling.partition_name;
END
$$;
"""

POLLER_READS_RETENTION = """
-- The poller (0007) runs `outbox status`, which names what holds retention back (0016).
DO $grant$
DECLARE
    poller text := coalesce(nullif(current_setting('outbox.role_prefix', true), ''), 'outbox')
                   || '_poller';
BEGIN
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = poller) THEN
        EXECUTE format('{statement}', poller);
    END IF;
END
$grant$;
"""


def upgrade() -> None:
    op.execute(REPLAY_REQUESTS)
    op.execute(CLOSE_BY_AGE)
    op.execute(
        POLLER_READS_RETENTION.format(statement="GRANT SELECT ON outbox.retention_status TO %I")
    )


def downgrade() -> None:
    op.execute(
        POLLER_READS_RETENTION.format(statement="REVOKE SELECT ON outbox.retention_status FROM %I")
    )
    op.execute("DROP FUNCTION outbox.close_message_partition_by_age(interval, interval)")
    op.execute("ALTER TABLE outbox.parked_messages DROP COLUMN replay_requested_at")
