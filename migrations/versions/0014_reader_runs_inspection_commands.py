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

TABLES = "outbox.subscriptions, outbox.retention_status"


def _for_reader(statement: str) -> str:
    """`statement`, its role a %I, run for the reader role (0007) where it exists."""
    return f"""
-- The reader (0007) runs `outbox status`, `subscription list` and `subscription show` (0014).
DO $privileges$
DECLARE
    prefix text := coalesce(nullif(current_setting('outbox.role_prefix', true), ''), 'outbox');
BEGIN
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = prefix || '_reader') THEN
        EXECUTE format('{statement}', prefix || '_reader');
    END IF;
END
$privileges$;
"""


def upgrade() -> None:
    op.execute(_for_reader(f"GRANT SELECT ON {TABLES} TO %I"))


def downgrade() -> None:
    op.execute(_for_reader(f"REVOKE SELECT ON {TABLES} FROM %I"))
