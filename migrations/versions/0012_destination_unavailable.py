"""subscription_status.destination_unavailable: why a subscription's handler cannot deliver now.

A relay whose broker is down (or misses its stream, exchange or subject) raises
DestinationUnavailable; the leader records the last such reason in its runtime figures until a
delivery succeeds again, and the view shows it while that leader holds the lease, so `outbox
status` and any SQL reader see that a relay is failing, and why.

Revision ID: 0012
Revises: 0011
"""

from alembic import op
from sqlalchemy import text

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

WITH_REASON = """
-- Per subscription: where it stands, how far behind, who leads it, and what holds it back.
CREATE OR REPLACE VIEW outbox.subscription_status AS
SELECT s.subscription_id,
       s.publication_id,
       s.last_processed_transaction_id AS checkpoint_transaction_id,
       s.last_processed_position AS checkpoint_position,
       s.epoch,
       coalesce(behind.messages, 0) AS messages_behind,
       clock_timestamp() - behind.oldest_appended_at AS oldest_undelivered_age,
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
       blockers.description AS blocked_by,
       CASE WHEN leader.expires_at > clock_timestamp()
            THEN leader.runtime ->> 'destination_unavailable' END AS destination_unavailable
FROM outbox.subscriptions AS s
LEFT JOIN outbox.subscription_leaders AS leader USING (subscription_id)
LEFT JOIN LATERAL (
    SELECT count(*) AS messages, min(m.appended_at) AS oldest_appended_at
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

# CREATE OR REPLACE VIEW may add a column but never drop one: the way back recreates the view,
# and gives back the SELECT grants it had (the roles of `outbox migrate --roles`).
WITHOUT_REASON = """
-- Per subscription: where it stands, how far behind, who leads it, and what holds it back.
CREATE VIEW outbox.subscription_status AS
SELECT s.subscription_id,
       s.publication_id,
       s.last_processed_transaction_id AS checkpoint_transaction_id,
       s.last_processed_position AS checkpoint_position,
       s.epoch,
       coalesce(behind.messages, 0) AS messages_behind,
       clock_timestamp() - behind.oldest_appended_at AS oldest_undelivered_age,
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
    SELECT count(*) AS messages, min(m.appended_at) AS oldest_appended_at
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


def upgrade() -> None:
    op.execute(WITH_REASON)


def downgrade() -> None:
    grantees = (
        op.get_bind()
        .execute(
            text(
                "SELECT DISTINCT grantee FROM information_schema.role_table_grants"
                " WHERE table_schema = 'outbox' AND table_name = 'subscription_status'"
                " AND privilege_type = 'SELECT' AND grantee <> current_user"
            )
        )
        .scalars()
        .all()
    )
    op.execute("DROP VIEW outbox.subscription_status")
    op.execute(WITHOUT_REASON)
    for grantee in grantees:
        quoted = grantee.replace('"', '""')
        op.execute(f'GRANT SELECT ON outbox.subscription_status TO "{quoted}"')
