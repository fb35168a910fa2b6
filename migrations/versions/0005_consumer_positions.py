"""consumer_positions: where each catch-up consumer (poller.subscribe) stands.

A consumer writes its position in the same transaction as its own output, so the two commit
together (poller.store_checkpoint); `outbox.consumer_positions` is the table for consumers
that keep no table of their own.

Revision ID: 0005
Revises: 0004
"""

from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

CONSUMER_POSITIONS = """
-- Where each catch-up consumer (poller.subscribe) stands: written by the consumer inside the
-- transaction that writes its own output (poller.store_checkpoint), so the output and the
-- position commit together and a restart resumes exactly after what was written.
CREATE TABLE outbox.consumer_positions (
    consumer_name text PRIMARY KEY,
    transaction_id xid8 NOT NULL,
    position bigint NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT consumer_positions_consumer_name_valid
        CHECK (consumer_name <> '' AND length(consumer_name) <= 200)
);
"""


def upgrade() -> None:
    op.execute(CONSUMER_POSITIONS)


def downgrade() -> None:
    op.execute("DROP TABLE outbox.consumer_positions")
