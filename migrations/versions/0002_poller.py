"""The poller: leader leases with fencing tokens, parked messages, blockers and status views.

Revision ID: 0002
Revises: 0001
"""

from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
-- `outbox parked replay` bumps this; the leader notices at its next lease renewal.
ALTER TABLE outbox.subscriptions ADD COLUMN replay_requests bigint NOT NULL DEFAULT 0;

-- One row per subscription that a daemon leads. Leadership is a lease with a fencing token:
-- every takeover raises the token, and checkpoint writes are conditional on it, so a paused or
-- partitioned former leader can never write again once another process took over.
CREATE TABLE outbox.subscription_leaders (
    subscription_id text PRIMARY KEY
        REFERENCES outbox.subscriptions (subscription_id) ON DELETE CASCADE,
    token bigint NOT NULL,
    holder text NOT NULL,
    host text NOT NULL,
    pid integer NOT NULL,
    since timestamptz NOT NULL,
    expires_at timestamptz NOT NULL,
    -- What the leader's state machine holds (consumers, in flight, retries, draining keys),
    -- written with each checkpoint rather than per message.
    runtime jsonb NOT NULL DEFAULT '{}',
    runtime_at timestamptz NULL
);

-- Messages a subscription gave up on after max_retry_count attempts (or a handler asked to
-- park). The checkpoint passes a message only once its parked row is committed.
CREATE TABLE outbox.parked_messages (
    subscription_id text NOT NULL
        REFERENCES outbox.subscriptions (subscription_id) ON DELETE CASCADE,
    position bigint NOT NULL,
    transaction_id xid8 NOT NULL,
    attempts integer NOT NULL,
    last_error text NOT NULL,
    parked_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (subscription_id, position)
);

-- pg_stat_activity and pg_prepared_xacts show 32-bit xids; the outbox stores xid8. This widens
-- a running xid to xid8 relative to the next xid to be assigned (it is at most 2^31 older).
CREATE FUNCTION outbox.widen_xid(running xid) RETURNS xid8
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT (CASE WHEN widened > next_id THEN widened - 4294967296 ELSE widened END)::text::xid8
    FROM (SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint AS next_id) AS next_xid,
         LATERAL (SELECT ((next_id >> 32) << 32) | running::text::bigint AS widened) AS w
$$;

-- Every transaction in the cluster that holds an xid, in any database: each one holds back
-- pg_snapshot_xmin and so every poller. Idle-in-transaction sessions and forgotten prepared
-- transactions are the usual culprits.
CREATE VIEW outbox.blocking_transactions AS
SELECT 'session'::text AS kind,
       a.pid,
       a.datname AS database,
       a.usename AS user_name,
       a.application_name,
       a.client_addr::text AS client_address,
       a.state,
       a.xact_start AS transaction_start,
       clock_timestamp() - a.xact_start AS transaction_age,
       left(a.query, 200) AS query_start,
       outbox.widen_xid(a.backend_xid) AS transaction_id
FROM pg_stat_activity AS a
WHERE a.backend_xid IS NOT NULL
UNION ALL
SELECT 'prepared transaction',
       NULL,
       p.database,
       p.owner,
       p.gid,
       NULL,
       'prepared',
       p.prepared,
       clock_timestamp() - p.prepared,
       NULL,
       outbox.widen_xid(p.transaction)
FROM pg_prepared_xacts AS p;

-- Per subscription: where it stands, how far behind, who leads it, and what holds it back.
CREATE VIEW outbox.subscription_status AS
SELECT s.subscription_id,
       s.publication_id,
       s.last_processed_transaction_id AS checkpoint_transaction_id,
       s.last_processed_position AS checkpoint_position,
       s.epoch,
       coalesce(behind.messages, 0) AS messages_behind,
       clock_timestamp() - behind.oldest_scheduled AS oldest_undelivered_age,
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
    SELECT count(*) AS messages, min(m.scheduled) AS oldest_scheduled
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
    )


def downgrade() -> None:
    op.execute("DROP VIEW outbox.subscription_status")
    op.execute("DROP VIEW outbox.blocking_transactions")
    op.execute("DROP FUNCTION outbox.widen_xid(xid)")
    op.execute("DROP TABLE outbox.parked_messages")
    op.execute("DROP TABLE outbox.subscription_leaders")
    op.execute("ALTER TABLE outbox.subscriptions DROP COLUMN replay_requests")
