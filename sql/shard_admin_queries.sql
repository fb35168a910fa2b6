-- The statements of the operator's side of shards: creating a sharded subscription, changing its
-- shard count, seeking its shards, and what `subscription show`, `status` and the metrics read
-- of them (poller/store/admin_store.py, poller/store/shard_store.py). Same format as
-- queries.sql: `-- name --`, one line saying what it does, the statement.

-- lock_subscription_for_operator --
-- One subscription as get_subscription reads it, its shard layout included, with its row locked until the transaction ends: a change of the shard count, a seek and the daemon's end of a drain (lock_subscription) take it one at a time. FOR NO KEY UPDATE, as the daemon does: it excludes them all and every UPDATE of the row, but not the key-share locks that inserting a lease, a member or a parked row takes on it.
SELECT subscription_id, publication_id, last_processed_transaction_id::text::bigint,
       last_processed_position, epoch, settings, replay_requests,
       shard_count, draining_shard_count,
       shard_barrier_transaction_id::text::bigint, shard_barrier_position
FROM outbox.subscriptions WHERE subscription_id = %(subscription)s
FOR NO KEY UPDATE

-- shard_barrier --
-- Where a change of the shard count splits delivery between the old shards and the new: the end of the last transaction older than the change's own (every message of an older one is the old shards', even one that commits after this change), unless a shard's checkpoint stands further on. Not the last message safe to read now: a writer older than the change may commit before the change does, and a term of the old layout, whose reads do not see the uncommitted change, reads it at once; this transaction's own id is in the snapshot of every read that does not see it, so such a read stops below it. The subscription's own checkpoint stands in for a plain subscription's one shard; for a sharded one it is the floor, never the greatest. The shard rows are locked, so no checkpoint moves between this read and the change's commit.
WITH shards AS MATERIALIZED (
    SELECT sh.last_processed_transaction_id AS transaction_id,
           sh.last_processed_position AS position
    FROM outbox.subscription_shards AS sh
    WHERE sh.subscription_id = %(subscription)s
    FOR UPDATE
),
candidates AS (
    SELECT transaction_id, position FROM shards
    UNION ALL
    SELECT s.last_processed_transaction_id, s.last_processed_position
    FROM outbox.subscriptions AS s WHERE s.subscription_id = %(subscription)s
    UNION ALL
    -- This transaction's id (the top-level one, from a savepoint too), in the form `--from
    -- end` gives the place before a running transaction (outbox.positions.at_frontier).
    SELECT (pg_current_xact_id()::text::bigint - 1)::text::xid8, 9223372036854775807
)
SELECT transaction_id::text::bigint, position FROM candidates
ORDER BY transaction_id DESC, position DESC
LIMIT 1

-- insert_shards --
-- The checkpoint rows of every shard of one shard count, all at the same position.
INSERT INTO outbox.subscription_shards
    (subscription_id, shard_count, shard, last_processed_transaction_id, last_processed_position)
SELECT %(subscription)s, %(shard_count)s, shard, %(transaction_id)s::text::xid8, %(position)s
FROM generate_series(0, %(shard_count)s - 1) AS shard

-- begin_shard_change --
-- Starts a change of the shard count: the current count drains up to the barrier while the new one waits behind it. The checkpoint (the floor) stays where it is.
UPDATE outbox.subscriptions
SET draining_shard_count = shard_count,
    shard_count = %(shard_count)s,
    shard_barrier_transaction_id = %(transaction_id)s::text::xid8,
    shard_barrier_position = %(position)s,
    updated_at = clock_timestamp()
WHERE subscription_id = %(subscription)s

-- seek_shards --
-- Moves every shard's checkpoint of a subscription to a seek's target, with the seek that moves the subscription's own and raises its epoch (no rows for a plain subscription).
UPDATE outbox.subscription_shards
SET last_processed_transaction_id = %(transaction_id)s::text::xid8,
    last_processed_position = %(position)s,
    updated_at = clock_timestamp()
WHERE subscription_id = %(subscription)s

-- shard_status --
-- The shards of some subscriptions as outbox.subscription_shard_status shows them (a plain subscription: shard 0 of 1), each subscription's draining shards first.
SELECT subscription_id, shard_count, shard, draining,
       checkpoint_transaction_id::text::bigint, checkpoint_position, messages_behind,
       leader_host, leader_pid, leader_since, leader_alive
FROM outbox.subscription_shard_status
WHERE subscription_id = ANY(%(subscriptions)s)
ORDER BY subscription_id, draining DESC, shard

-- shard_leaders --
-- Every shard of every subscription (a plain one: shard 0 of 1) with its leader and whether that lease is live, each subscription's draining shards first. From the shard view, which a reader may read; the planner drops its backlog count, which this does not name.
SELECT subscription_id, shard_count, shard, draining,
       leader_alive, leader_host, leader_pid, leader_since
FROM outbox.subscription_shard_status
ORDER BY subscription_id, draining DESC, shard
