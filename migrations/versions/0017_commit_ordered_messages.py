"""Messages are ordered as their transactions committed, not only as they took their ids.

`outbox.messages.transaction_id`, the first half of delivery order, was the writer's own xid,
handed out at the transaction's first write. A transaction that wrote something first and
then waited for a row lock its successor held carried the older id, so its message was
delivered before the successor's, which had committed first. The column now defaults to
`outbox.ordering_transaction_id()`: the greater of the writer's xid and the newest xid that
had completed when the appending statement took its snapshot, so a message comes after every
message whose transaction committed before it was appended (docs/architecture.md, "Commit
order"). Never below the writer's own xid, so the snapshot-safe read stays gap-free.

Only the default changes: rows already written keep their ids, which are their writers' xids
as the rule gives for them, so checkpoints, shard positions, retired marks and Spark offsets
keep their meaning, and readers change nothing. Every writer that leaves the column to its
default follows the rule from the next statement on, whatever version of the package it runs.
`ONLY`: rows are inserted through the partitioned table, whose default applies; partitions
carry none (outbox.create_message_partitions copies constraints only).

Revision ID: 0017
Revises: 0016
"""

from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None

ORDERING_TRANSACTION_ID = """
-- The transaction id a new message is ordered by (0017): the greater of the writer's own xid
-- and the newest xid completed when the appending statement took its snapshot
-- (pg_snapshot_xmax is that plus one). Every message a statement can see was appended by a
-- transaction that had completed, so its id is at most that newest one: the new message sorts
-- after it. A plain SQL function, inlined into the INSERT: no call, a few tenths of a
-- microsecond a row.
CREATE FUNCTION outbox.ordering_transaction_id() RETURNS xid8
LANGUAGE sql VOLATILE AS $$
    SELECT greatest(pg_current_xact_id(),
                    (pg_snapshot_xmax(pg_current_snapshot())::text::bigint - 1)::text::xid8)
$$;

ALTER TABLE ONLY outbox.messages
    ALTER COLUMN transaction_id SET DEFAULT outbox.ordering_transaction_id();
"""

WRITERS_OWN_TRANSACTION_ID = """
ALTER TABLE ONLY outbox.messages ALTER COLUMN transaction_id SET DEFAULT pg_current_xact_id();
DROP FUNCTION outbox.ordering_transaction_id();
"""


def upgrade() -> None:
    op.execute(ORDERING_TRANSACTION_ID)


def downgrade() -> None:
    op.execute(WRITERS_OWN_TRANSACTION_ID)
