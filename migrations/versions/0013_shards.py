"""Shards: one subscription led by many `outbox poll` processes, per-key order kept.

A subscription's messages split into `shard_count` shards by a hash of their partition key
(outbox.message_shard); each shard has its own lease (outbox.subscription_leaders, keyed by
shard now), checkpoint (outbox.subscription_shards) and parked messages, and the live
processes (outbox.subscription_members) split the shards between them. A change of the count
drains the old shards to a barrier before the new ones start (docs/architecture.md, "Shards").
A subscription of one shard stores and reads exactly as before.

Revision ID: 0013
Revises: 0012
"""

import importlib.util
from pathlib import Path
from typing import Any

from alembic import op
from sqlalchemy import text

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

UPGRADE = """
-- Shards (0013): one subscription led by many processes, a lease, checkpoint and parked set
-- per shard. A message's shard among N: the first 4 bytes of the MD5 of its partition key, read
-- as an unsigned big-endian integer, modulo N; a keyless message's position modulo N. Not
-- crc32: inside a shard `pinned` places keys on consumers by crc32 modulo the consumer count,
-- and the same hash would put every key of shard 0 of 2 on even consumers only.
CREATE FUNCTION outbox.message_shard(
    partition_key text, message_position bigint, shard_count integer)
RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT ((CASE WHEN partition_key IS NULL THEN message_position
                  ELSE ('x' || left(md5(partition_key), 8))::bit(32)::bigint END)
            % shard_count)::integer
$$;

-- shard_count is the layout the subscription is in; during a change of it, the old count is
-- draining_shard_count: its shards finish every message up to the barrier (the last message
-- safe to read when the change was made), and the new shards start after the barrier only once
-- they have (see docs/architecture.md, "Shards"). last_processed_* is then the floor: the
-- lowest checkpoint of any shard, which retention, the status view and `outbox skip` read.
ALTER TABLE outbox.subscriptions
    ADD COLUMN shard_count integer NOT NULL DEFAULT 1,
    ADD COLUMN draining_shard_count integer NULL,
    ADD COLUMN shard_barrier_transaction_id xid8 NULL,
    ADD COLUMN shard_barrier_position bigint NULL,
    ADD CONSTRAINT subscriptions_shard_count_valid CHECK (shard_count BETWEEN 1 AND 256),
    ADD CONSTRAINT subscriptions_shard_change_whole
        CHECK ((draining_shard_count IS NULL) = (shard_barrier_transaction_id IS NULL)
               AND (shard_barrier_transaction_id IS NULL) = (shard_barrier_position IS NULL)
               AND draining_shard_count IS DISTINCT FROM shard_count);

-- Each shard's checkpoint, for a subscription with more than one shard or in a change of its
-- count (a subscription of one shard keeps its checkpoint in outbox.subscriptions alone).
CREATE TABLE outbox.subscription_shards (
    subscription_id text NOT NULL
        REFERENCES outbox.subscriptions (subscription_id) ON DELETE CASCADE,
    shard_count integer NOT NULL,
    shard integer NOT NULL,
    last_processed_transaction_id xid8 NOT NULL,
    last_processed_position bigint NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (subscription_id, shard_count, shard),
    CONSTRAINT subscription_shards_shard_valid CHECK (shard >= 0 AND shard < shard_count)
);

-- A lease per shard. bounded: the term reads only up to its draining layout's barrier (set when
-- the lease was taken during a change); an unbounded lease of an old layout holds the change.
ALTER TABLE outbox.subscription_leaders
    ADD COLUMN shard_count integer NOT NULL DEFAULT 1,
    ADD COLUMN shard integer NOT NULL DEFAULT 0,
    ADD COLUMN bounded boolean NOT NULL DEFAULT false,
    DROP CONSTRAINT subscription_leaders_pkey,
    ADD PRIMARY KEY (subscription_id, shard_count, shard);

-- The `outbox poll` processes that share a subscription's shards, each renewing its row; the
-- live ones split the shards between them (poller/membership/assignment.py).
CREATE TABLE outbox.subscription_members (
    subscription_id text NOT NULL
        REFERENCES outbox.subscriptions (subscription_id) ON DELETE CASCADE,
    member text NOT NULL,
    host text NOT NULL,
    pid integer NOT NULL,
    since timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL,
    PRIMARY KEY (subscription_id, member)
);

-- Per subscription: where it stands (the floor of its shards), how far behind, who leads it
-- (of several shards: a live leader, shards of the current count first), its leaders' figures
-- summed, what holds it back, why its destination cannot take messages now, and its shards.
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
       coalesce(leaders.consumers, 0) AS consumers,
       coalesce(leaders.in_flight, 0) AS in_flight,
       coalesce(leaders.retry_queue, 0) AS retry_queue,
       coalesce(leaders.buffered, 0) AS buffered,
       coalesce(leaders.draining_keys, '[]') AS draining_keys,
       parked.messages AS parked_messages,
       clock_timestamp() - parked.oldest AS oldest_parked_age,
       hidden.oldest_transaction_id AS oldest_hidden_transaction_id,
       blockers.pids AS blocked_by_pids,
       blockers.description AS blocked_by,
       leaders.destination_unavailable,
       s.shard_count AS shards,
       s.draining_shard_count AS draining_shards
FROM outbox.subscriptions AS s
LEFT JOIN LATERAL (
    SELECT l.host, l.pid, l.since, l.expires_at
    FROM outbox.subscription_leaders AS l
    WHERE l.subscription_id = s.subscription_id
    ORDER BY l.expires_at > clock_timestamp() DESC, l.shard_count = s.shard_count DESC, l.shard
    LIMIT 1
) AS leader ON true
LEFT JOIN LATERAL (
    SELECT sum((l.runtime ->> 'consumers')::int)::int AS consumers,
           sum((l.runtime ->> 'in_flight')::int)::int AS in_flight,
           sum((l.runtime ->> 'retry_queue')::int)::int AS retry_queue,
           sum((l.runtime ->> 'buffered')::int)::int AS buffered,
           (SELECT jsonb_agg(k) FROM outbox.subscription_leaders AS d,
                   jsonb_array_elements(coalesce(d.runtime -> 'draining_keys', '[]')) AS k
            WHERE d.subscription_id = s.subscription_id) AS draining_keys,
           min(l.runtime ->> 'destination_unavailable')
               FILTER (WHERE l.expires_at > clock_timestamp()) AS destination_unavailable
    FROM outbox.subscription_leaders AS l
    WHERE l.subscription_id = s.subscription_id
) AS leaders ON true
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

-- Per shard of every subscription (one row, shard 0 of 1, for a subscription of one shard):
-- its checkpoint, the messages of that shard after it (a draining shard's: up to the barrier),
-- and its leader. The backlog is read once per subscription, from its floor, each message's
-- shard computed once per shard count, not once per shard.
CREATE VIEW outbox.subscription_shard_status AS
WITH units AS (
    SELECT s.subscription_id, s.publication_id, u.shard_count, u.shard,
           coalesce(u.shard_count = s.draining_shard_count, false) AS draining,
           u.transaction_id, u.position
    FROM outbox.subscriptions AS s
    CROSS JOIN LATERAL (
        SELECT sh.shard_count, sh.shard, sh.last_processed_transaction_id AS transaction_id,
               sh.last_processed_position AS position
        FROM outbox.subscription_shards AS sh
        WHERE sh.subscription_id = s.subscription_id
        UNION ALL
        SELECT 1, 0, s.last_processed_transaction_id, s.last_processed_position
        WHERE NOT EXISTS (SELECT FROM outbox.subscription_shards AS sh
                          WHERE sh.subscription_id = s.subscription_id)
    ) AS u
),
behind AS (
    -- Grouped by the columns it is joined on, so a query that names no count drops it.
    SELECT s.subscription_id, counted.shard_count, counted.shard,
           sum(counted.messages)::bigint AS messages
    FROM outbox.subscriptions AS s
    CROSS JOIN LATERAL (
        SELECT u.shard_count, u.shard, count(*) AS messages
        FROM (
            -- Each message of the backlog with its shard under each count (OFFSET 0: planned
            -- on its own, so the backlog is read once, not once per shard).
            SELECT m.transaction_id, m.position, c.shard_count,
                   CASE WHEN c.shard_count = 1 THEN 0
                        ELSE outbox.message_shard(m.partition_key, m.position, c.shard_count)
                   END AS shard
            FROM outbox.messages AS m
            CROSS JOIN (VALUES (s.shard_count), (s.draining_shard_count)) AS c(shard_count)
            WHERE m.publication_id = s.publication_id
              AND (m.transaction_id, m.position)
                  > (s.last_processed_transaction_id, s.last_processed_position)
              AND c.shard_count IS NOT NULL
              AND (c.shard_count IS DISTINCT FROM s.draining_shard_count
                   OR (m.transaction_id, m.position)
                      <= (s.shard_barrier_transaction_id, s.shard_barrier_position))
            OFFSET 0
        ) AS placed
        JOIN units AS u
          ON u.subscription_id = s.subscription_id AND u.shard_count = placed.shard_count
         AND u.shard = placed.shard
        WHERE (placed.transaction_id, placed.position) > (u.transaction_id, u.position)
        GROUP BY u.shard_count, u.shard
    ) AS counted
    GROUP BY s.subscription_id, counted.shard_count, counted.shard
)
SELECT u.subscription_id,
       u.publication_id,
       u.shard_count,
       u.shard,
       u.draining,
       u.transaction_id AS checkpoint_transaction_id,
       u.position AS checkpoint_position,
       coalesce(behind.messages, 0) AS messages_behind,
       leader.host AS leader_host,
       leader.pid AS leader_pid,
       leader.since AS leader_since,
       coalesce(leader.expires_at > clock_timestamp(), false) AS leader_alive
FROM units AS u
LEFT JOIN behind USING (subscription_id, shard_count, shard)
LEFT JOIN outbox.subscription_leaders AS leader
       ON leader.subscription_id = u.subscription_id
      AND leader.shard_count = u.shard_count AND leader.shard = u.shard;

-- A least-privilege poller (0007) renews its membership, moves shard checkpoints and the
-- floor, and ends a change of the shard count once its barrier is passed; readers see shards.
DO $grant$
DECLARE
    prefix text := coalesce(nullif(current_setting('outbox.role_prefix', true), ''), 'outbox');
BEGIN
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = prefix || '_poller') THEN
        EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON outbox.subscription_members,'
                       ' outbox.subscription_shards TO %I', prefix || '_poller');
        EXECUTE format('GRANT UPDATE (draining_shard_count, shard_barrier_transaction_id,'
                       ' shard_barrier_position) ON outbox.subscriptions TO %I',
                       prefix || '_poller');
        EXECUTE format('GRANT SELECT ON outbox.subscription_shard_status TO %I',
                       prefix || '_poller');
    END IF;
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = prefix || '_reader') THEN
        EXECUTE format('GRANT SELECT ON outbox.subscription_shard_status,'
                       ' outbox.subscription_shards TO %I', prefix || '_reader');
    END IF;
END
$grant$;
"""


def _revision_0012() -> Any:
    """0012's module, whose view this one replaced (its file name is not an importable name)."""
    path = Path(__file__).with_name("0012_destination_unavailable.py")
    spec = importlib.util.spec_from_file_location("revision_0012", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    # The status view loses columns, which CREATE OR REPLACE cannot do: recreate 0012's and
    # give back the SELECT grants it had.
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
    op.execute("DROP VIEW outbox.subscription_shard_status")
    op.execute("DROP VIEW outbox.subscription_status")
    op.execute(_revision_0012().WITH_REASON)
    for grantee in grantees:
        quoted = grantee.replace('"', '""')
        op.execute(f'GRANT SELECT ON outbox.subscription_status TO "{quoted}"')
    op.execute(
        """
DROP TABLE outbox.subscription_members;
DELETE FROM outbox.subscription_leaders WHERE (shard_count, shard) <> (1, 0);
ALTER TABLE outbox.subscription_leaders
    DROP CONSTRAINT subscription_leaders_pkey,
    DROP COLUMN shard_count,
    DROP COLUMN shard,
    DROP COLUMN bounded,
    ADD PRIMARY KEY (subscription_id);
DROP TABLE outbox.subscription_shards;
ALTER TABLE outbox.subscriptions
    DROP CONSTRAINT subscriptions_shard_change_whole,
    DROP CONSTRAINT subscriptions_shard_count_valid,
    DROP COLUMN shard_count,
    DROP COLUMN draining_shard_count,
    DROP COLUMN shard_barrier_transaction_id,
    DROP COLUMN shard_barrier_position;
DROP FUNCTION outbox.message_shard(text, bigint, integer);
"""
    )
