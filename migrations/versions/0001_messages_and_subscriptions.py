"""The outbox: messages and subscriptions.

Revision ID: 0001
Revises:
"""

from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
CREATE TABLE outbox.messages (
    position bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    -- The writer's own transaction id: rows become readable only once every transaction that
    -- could still commit below them has ended (see the read_batch query).
    transaction_id xid8 NOT NULL DEFAULT pg_current_xact_id(),
    publication_id text NOT NULL,
    message_id text NOT NULL,
    message_type text NOT NULL,
    partition_key text NULL,
    data jsonb NOT NULL,
    headers jsonb NOT NULL DEFAULT '{}',
    scheduled timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT messages_publication_id_valid
        CHECK (publication_id <> '' AND length(publication_id) <= 200),
    CONSTRAINT messages_message_id_valid
        CHECK (message_id <> '' AND length(message_id) <= 200),
    CONSTRAINT messages_message_type_valid
        CHECK (message_type <> '' AND length(message_type) <= 200),
    CONSTRAINT messages_partition_key_valid
        CHECK (partition_key IS NULL OR (partition_key <> '' AND length(partition_key) <= 200)),
    CONSTRAINT messages_headers_object CHECK (jsonb_typeof(headers) = 'object'),
    CONSTRAINT messages_message_id_unique UNIQUE (publication_id, message_id)
);

-- Serves the poll query: equality on the publication, then a row comparison on
-- (transaction_id, position) walks the index in delivery order with no sort.
CREATE INDEX messages_delivery_order ON outbox.messages (publication_id, transaction_id, position);

CREATE TABLE outbox.subscriptions (
    subscription_id text PRIMARY KEY,
    publication_id text NOT NULL,
    last_processed_transaction_id xid8 NOT NULL DEFAULT '0',
    last_processed_position bigint NOT NULL DEFAULT 0,
    epoch bigint NOT NULL DEFAULT 0,
    settings jsonb NOT NULL DEFAULT '{}',
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT subscriptions_subscription_id_valid
        CHECK (subscription_id <> '' AND length(subscription_id) <= 200),
    CONSTRAINT subscriptions_publication_id_valid
        CHECK (publication_id <> '' AND length(publication_id) <= 200),
    CONSTRAINT subscriptions_settings_object CHECK (jsonb_typeof(settings) = 'object')
);
"""
    )


def downgrade() -> None:
    op.execute("DROP TABLE outbox.subscriptions")
    op.execute("DROP TABLE outbox.messages")
