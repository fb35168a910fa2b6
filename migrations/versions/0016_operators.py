"""What operators were missing: `outbox status` for the poller role.

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
    op.execute(
        POLLER_READS_RETENTION.format(statement="GRANT SELECT ON outbox.retention_status TO %I")
    )


def downgrade() -> None:
    op.execute(
        POLLER_READS_RETENTION.format(statement="REVOKE SELECT ON outbox.retention_status FROM %I")
    )
