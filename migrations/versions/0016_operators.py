"""What operators were missing: replays of one parked message that wait for a leader, and
`outbox status` for the poller role.

- `outbox.parked_messages.replay_requested_at`: `outbox parked replay` marks the rows to
  deliver again (all of a subscription's, or one), and the leader of each row's shard replays
  the marked rows when it next renews, or when it starts leading: a replay asked while no
  daemon runs waits in the row instead of being refused. The leader deletes the row once the
  message is handled, or parks it again (clearing the mark it read).
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
    op.execute(
        POLLER_READS_RETENTION.format(statement="GRANT SELECT ON outbox.retention_status TO %I")
    )


def downgrade() -> None:
    op.execute(
        POLLER_READS_RETENTION.format(statement="REVOKE SELECT ON outbox.retention_status FROM %I")
    )
    op.execute("ALTER TABLE outbox.parked_messages DROP COLUMN replay_requested_at")
