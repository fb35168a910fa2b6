"""widen_xid: the signed 32-bit distance to the next xid, so an xid at or above it widens right.

Revision ID: 0003
Revises: 0002
"""

from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
-- pg_stat_activity and pg_prepared_xacts show 32-bit xids; the outbox stores xid8. PostgreSQL
-- stops assigning xids before the oldest unfrozen one is 2^31 behind the next, so every running
-- xid is within 2^31 of next_xid: the signed 32-bit distance from next_xid's low half places it
-- in its epoch (the arithmetic of FullXidRelativeTo in PostgreSQL's access/transam.h).
CREATE FUNCTION outbox.widen_xid_around(running xid, next_xid xid8) RETURNS xid8
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    -- Only a corrupt input lands before epoch 0: clamp it to 3, FirstNormalTransactionId.
    SELECT greatest(next_id + CASE WHEN distance >= 2147483648 THEN distance - 4294967296
                                   ELSE distance END, 3)::text::xid8
    FROM (SELECT next_xid::text::bigint AS next_id) AS n,
         LATERAL (SELECT (running::text::bigint - (next_id & 4294967295) + 4294967296)
                         % 4294967296 AS distance) AS d
$$;

-- The snapshot's xmax (latestCompletedXid + 1) stands in for the next xid: reading it assigns
-- no xid to the caller. A transaction still running can hold an xid at or above it; the signed
-- distance puts that one ahead of xmax, in the same epoch.
CREATE OR REPLACE FUNCTION outbox.widen_xid(running xid) RETURNS xid8
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT outbox.widen_xid_around(running, pg_snapshot_xmax(pg_current_snapshot()))
$$;
"""
    )


def downgrade() -> None:
    op.execute(
        """
CREATE OR REPLACE FUNCTION outbox.widen_xid(running xid) RETURNS xid8
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT (CASE WHEN widened > next_id THEN widened - 4294967296 ELSE widened END)::text::xid8
    FROM (SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint AS next_id) AS next_xid,
         LATERAL (SELECT ((next_id >> 32) << 32) | running::text::bigint AS widened) AS w
$$;
"""
    )
    op.execute("DROP FUNCTION outbox.widen_xid_around(xid, xid8)")
