-- The outbox schema for DBAs who do not run alembic. It must stay identical to the head of the
-- migration chain in migrations/: tests/integration/test_migrations.py compares the catalogs of
-- a database built each way, and `outbox migrate` adopts a database built from this file.
--
-- Run it as:  psql -v ON_ERROR_STOP=1 -f sql/schema.sql
-- It holds its own BEGIN and COMMIT, so it applies whole or not at all (no need for -1): after an
-- error PostgreSQL aborts the transaction, and the COMMIT at the end then rolls it back.

BEGIN;

CREATE SCHEMA IF NOT EXISTS outbox;

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
    -- When the message was appended: the writer transaction's start time. Delivery is never
    -- delayed by it; it dates a message for operators and time-windowed consumers.
    appended_at timestamptz NOT NULL DEFAULT now(),
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

-- pg_stat_activity and pg_prepared_xacts show 32-bit xids; the outbox stores xid8. PostgreSQL
-- stops assigning xids before the oldest unfrozen one is 2^31 behind the next, so every running
-- xid is within 2^31 of next_xid: the signed 32-bit distance from next_xid's low half places it
-- in its epoch (the arithmetic of FullXidRelativeTo in PostgreSQL's access/transam.h).
CREATE FUNCTION outbox.widen_xid_around(running xid, next_xid xid8) RETURNS xid8
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    -- Only a corrupt input lands before epoch 0: clamp it to 3, FirstNormalTransactionId.
    SELECT greatest(next_id + CASE WHEN distance >= 2147483648 THEN distance - 4294967296
                                   ELSE distance END, 3)::text::xid8
    FROM (SELECT next_xid::text::bigint AS next_id) AS n,
         LATERAL (SELECT (running::text::bigint - (next_id & 4294967295) + 4294967296)
                         % 4294967296 AS distance) AS d
$$;

-- The snapshot's xmax (latestCompletedXid + 1) stands in for the next xid: reading it assigns
-- no xid to the caller. A transaction still running can hold an xid at or above it; the signed
-- distance puts that one ahead of xmax, in the same epoch.
CREATE FUNCTION outbox.widen_xid(running xid) RETURNS xid8
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT outbox.widen_xid_around(running, pg_snapshot_xmax(pg_current_snapshot()))
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

-- `outbox skip NAME --to TX:POS` leaves a request here, with the epoch it was made in; the
-- leader applies it at its next lease renewal and clears it once the stored checkpoint has
-- reached it (a seek makes it void: its epoch is over).
ALTER TABLE outbox.subscriptions
    ADD COLUMN skip_to_transaction_id xid8 NULL,
    ADD COLUMN skip_to_position bigint NULL,
    ADD COLUMN skip_epoch bigint NULL,
    ADD CONSTRAINT subscriptions_skip_request_whole
        CHECK ((skip_to_transaction_id IS NULL) = (skip_to_position IS NULL)
               AND (skip_to_position IS NULL) = (skip_epoch IS NULL));

COMMIT;
