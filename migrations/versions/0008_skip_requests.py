"""Skip requests: `outbox skip NAME --to TX:POS` leaves one for the subscription's leader.

The leader reads it with each lease renewal, skips in its state machine, and clears it once the
stored checkpoint has reached it (or a seek made it void): until then a new leader applies it
again, so a crash cannot lose a skip.

Revision ID: 0008
Revises: 0007
"""

from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
-- `outbox skip` sets these; the leader applies them at its next lease renewal (see 0008).
ALTER TABLE outbox.subscriptions
    ADD COLUMN skip_to_transaction_id xid8 NULL,
    ADD COLUMN skip_to_position bigint NULL,
    ADD COLUMN skip_epoch bigint NULL,
    ADD CONSTRAINT subscriptions_skip_request_whole
        CHECK ((skip_to_transaction_id IS NULL) = (skip_to_position IS NULL)
               AND (skip_to_position IS NULL) = (skip_epoch IS NULL));

-- A least-privilege poller (0007) clears the request it has applied.
DO $grant$
DECLARE
    poller text := coalesce(nullif(current_setting('outbox.role_prefix', true), ''), 'outbox')
                   || '_poller';
BEGIN
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = poller) THEN
        EXECUTE format('GRANT UPDATE (skip_to_transaction_id, skip_to_position, skip_epoch)'
                       ' ON outbox.subscriptions TO %I', poller);
    END IF;
END
$grant$;
"""
    )


def downgrade() -> None:
    op.execute(
        """
ALTER TABLE outbox.subscriptions
    DROP CONSTRAINT subscriptions_skip_request_whole,
    DROP COLUMN skip_to_transaction_id,
    DROP COLUMN skip_to_position,
    DROP COLUMN skip_epoch;
"""
    )
