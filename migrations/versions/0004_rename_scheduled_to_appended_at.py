"""appended_at: messages.scheduled renamed to what it always held, the time of the append.

The column was set to now() by every append, nothing could set it otherwise and nothing delayed
delivery by it, so its name promised a delayed delivery that does not exist.

Revision ID: 0004
Revises: 0003
"""

from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

# A view refers to a column by number, so the view follows the rename by itself; it is replaced
# only so that its own name for the oldest undelivered message's time follows as well. The same
# view both ways, with only those two names differing.
SUBSCRIPTION_STATUS = """
-- Per subscription: where it stands, how far behind, who leads it, and what holds it back.
CREATE OR REPLACE VIEW outbox.subscription_status AS
SELECT s.subscription_id,
       s.publication_id,
       s.last_processed_transaction_id AS checkpoint_transaction_id,
       s.last_processed_position AS checkpoint_position,
       s.epoch,
       coalesce(behind.messages, 0) AS messages_behind,
       clock_timestamp() - behind.{oldest} AS oldest_undelivered_age,
       leader.host AS leader_host,
       leader.pid AS leader_pid,
       leader.since AS leader_since,
       coalesce(leader.expires_at > clock_timestamp(), false) AS leader_alive,
       coalesce((leader.runtime ->> 'consumers')::int, 0) AS consumers,
       coalesce((leader.runtime ->> 'in_flight')::int, 0) AS in_flight,
       coalesce((leader.runtime ->> 'retry_queue')::int, 0) AS retry_queue,
       coalesce((leader.runtime ->> 'buffered')::int, 0) AS buffered,
       coalesce(leader.runtime -> 'draining_keys', '[]') AS draining_keys,
       parked.messages AS parked_messages,
       clock_timestamp() - parked.oldest AS oldest_parked_age,
       hidden.oldest_transaction_id AS oldest_hidden_transaction_id,
       blockers.pids AS blocked_by_pids,
       blockers.description AS blocked_by
FROM outbox.subscriptions AS s
LEFT JOIN outbox.subscription_leaders AS leader USING (subscription_id)
LEFT JOIN LATERAL (
    SELECT count(*) AS messages, min(m.{column}) AS {oldest}
    FROM outbox.messages AS m
    WHERE m.publication_id = s.publication_id
      AND (m.transaction_id, m.position)
          > (s.last_processed_transaction_id, s.last_processed_position)
) AS behind ON true
LEFT JOIN LATERAL (
    SELECT count(*) AS messages, min(p.parked_at) AS oldest
    FROM outbox.parked_messages AS p WHERE p.subscription_id = s.subscription_id
) AS parked ON true
LEFT JOIN LATERAL (
    SELECT min(m.transaction_id) AS oldest_transaction_id
    FROM outbox.messages AS m
    WHERE m.publication_id = s.publication_id
      AND (m.transaction_id, m.position)
          > (s.last_processed_transaction_id, s.last_processed_position)
      AND m.transaction_id >= pg_snapshot_xmin(pg_current_snapshot())
) AS hidden ON true
LEFT JOIN LATERAL (
    SELECT array_agg(b.pid ORDER BY b.transaction_start) FILTER (WHERE b.pid IS NOT NULL) AS pids,
           string_agg(
               format('%s %s (%s, %s, %s, in transaction for %s)', b.kind,
                      coalesce(b.pid::text, b.application_name), b.database, b.user_name,
                      b.state, date_trunc('second', b.transaction_age)),
               '; ' ORDER BY b.transaction_start) AS description
    FROM outbox.blocking_transactions AS b
    WHERE b.transaction_id < hidden.oldest_transaction_id
) AS blockers ON true;
"""


# PostgreSQL 18 keeps NOT NULL as a named constraint (messages_<column>_not_null), and a
# column rename leaves its name behind, while a database built from schema.sql has the new
# name. Earlier versions have no such constraint, so these do nothing there.
RENAME_NOT_NULL_CONSTRAINT = """
DO $$
BEGIN
    IF EXISTS (SELECT FROM pg_constraint
               WHERE conrelid = 'outbox.messages'::regclass AND conname = '{old}') THEN
        ALTER TABLE outbox.messages RENAME CONSTRAINT {old} TO {new};
    END IF;
END $$
"""


def upgrade() -> None:
    op.execute("ALTER TABLE outbox.messages RENAME COLUMN scheduled TO appended_at")
    op.execute(
        RENAME_NOT_NULL_CONSTRAINT.format(
            old="messages_scheduled_not_null", new="messages_appended_at_not_null"
        )
    )
    op.execute(SUBSCRIPTION_STATUS.format(column="appended_at", oldest="oldest_appended_at"))


def downgrade() -> None:
    op.execute("ALTER TABLE outbox.messages RENAME COLUMN appended_at TO scheduled")
    op.execute(
        RENAME_NOT_NULL_CONSTRAINT.format(
            old="messages_appended_at_not_null", new="messages_scheduled_not_null"
        )
    )
    op.execute(SUBSCRIPTION_STATUS.format(column="scheduled", oldest="oldest_scheduled"))
