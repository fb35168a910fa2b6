"""The reader role runs the inspection commands: `outbox status`, `subscription list` and
`subscription show` read the subscriptions' rows and retention's view, which only the owner
and the poller could read (the reader saw the status views and failed on these commands with
"permission denied"). Neither holds a message's data; `parked list` shows the parked
messages' data, which stays the poller's and the owner's to read.

Revision ID: 0014
Revises: 0013
"""

from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

GRANTS = """
-- The reader (0007) runs `outbox status`, `subscription list` and `subscription show` (0014).
DO $grant$
DECLARE
    prefix text := coalesce(nullif(current_setting('outbox.role_prefix', true), ''), 'outbox');
BEGIN
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = prefix || '_reader') THEN
        EXECUTE format('GRANT SELECT ON outbox.subscriptions, outbox.retention_status TO %I',
                       prefix || '_reader');
    END IF;
END
$grant$;
"""

REVOKES = """
DO $revoke$
DECLARE
    prefix text := coalesce(nullif(current_setting('outbox.role_prefix', true), ''), 'outbox');
BEGIN
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = prefix || '_reader') THEN
        EXECUTE format('REVOKE SELECT ON outbox.subscriptions, outbox.retention_status FROM %I',
                       prefix || '_reader');
    END IF;
END
$revoke$;
"""


def upgrade() -> None:
    op.execute(GRANTS)


def downgrade() -> None:
    op.execute(REVOKES)
