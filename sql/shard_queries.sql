-- The statements of a shard's leader and of the processes sharing a sharded subscription (see
-- docs/explanation/shards.md). Same format as queries.sql.

-- get_subscription_for_shard --
-- One subscription as a shard's new term starts it: get_subscription's columns with the shard's own checkpoint (the subscription's when it is plain), then its shard layout.
SELECT s.subscription_id, s.publication_id,
       coalesce(sh.last_processed_transaction_id, s.last_processed_transaction_id)::text::bigint,
       coalesce(sh.last_processed_position, s.last_processed_position),
       s.epoch, s.settings, s.replay_requests,
       s.shard_count, s.draining_shard_count,
       s.shard_barrier_transaction_id::text::bigint, s.shard_barrier_position
FROM outbox.subscriptions AS s
LEFT JOIN outbox.subscription_shards AS sh
       ON sh.subscription_id = s.subscription_id
      AND sh.shard_count = %(shard_count)s AND sh.shard = %(shard)s
WHERE s.subscription_id = %(subscription)s

-- read_shards_batch --
-- read_batch for the shards of one count that a process leads, in one read (the process's shards share it: the database's cost grows with processes, not shards): the same snapshot-safe keyset read, only the messages of the shards named (outbox.message_shard), each with its shard, no further than the count's bound in the subscription's row (layout_read_bound: a draining count's barrier, even for a term that has not renewed since the change); every row, and one of null message columns when none is read, starts with the publication's retired-up-to mark (read_batch_with_retired's, in the read's own snapshot) and two figures of the same snapshot: the last message of the publication (any shard) safe to read, up to the same bound (after a short read, the shards have nothing of their own up to there), and the oldest committed transaction after `after` that the frontier still hides (oldest_hidden_transaction's answer, without its own round trip); and first, whether the read server passed its proof (read_server_proven): nothing else is read when it failed.
SELECT proof.proven, r.transaction_id::text::bigint, r.position,
       last.transaction_id::text::bigint, last.position, hidden.transaction_id::text::bigint,
       m.shard, {{message_columns}}
FROM (SELECT {{read_server_proven}} AS proven) AS proof
LEFT JOIN outbox.retired_positions AS r ON r.publication_id = %(publication)s
LEFT JOIN LATERAL (
    -- One bound on transaction_id, not a row comparison with `after` as well: the index scan
    -- then starts at the frontier, not at `after`, which trails it by every other shard's
    -- messages (25 ms over 200k of them). Rows of `after`'s own transaction at or before it
    -- count too, which only makes the reader re-check a little sooner.
    SELECT min(h.transaction_id) AS transaction_id
    FROM outbox.messages AS h
    WHERE proof.proven
      AND h.publication_id = %(publication)s
      AND h.transaction_id
          >= greatest(pg_snapshot_xmin(pg_current_snapshot()), %(after_transaction_id)s::text::xid8)
) AS hidden ON true
LEFT JOIN LATERAL (
    SELECT l.transaction_id, l.position
    FROM outbox.messages AS l
    WHERE proof.proven
      AND l.publication_id = %(publication)s
      AND l.transaction_id < pg_snapshot_xmin(pg_current_snapshot())
      AND (l.transaction_id, l.position) <= ({{layout_read_bound}})
    ORDER BY l.transaction_id DESC, l.position DESC
    LIMIT 1
) AS last ON true
LEFT JOIN LATERAL (
    SELECT * FROM (
        SELECT m.*, outbox.message_shard(m.partition_key, m.position, %(shard_count)s) AS shard
        FROM outbox.messages AS m
        WHERE proof.proven
          AND m.publication_id = %(publication)s
          AND (m.transaction_id, m.position) > (%(after_transaction_id)s::text::xid8, %(after_position)s::bigint)
          AND (m.transaction_id, m.position) <= ({{layout_read_bound}})
          AND m.transaction_id < pg_snapshot_xmin(pg_current_snapshot())
    ) AS m
    WHERE m.shard = ANY(%(shards)s::integer[])
    ORDER BY m.transaction_id, m.position
    LIMIT %(limit)s
) AS m ON true
ORDER BY m.transaction_id, m.position

-- read_shard_parked_messages --
-- read_parked_messages for one shard: the parked messages to replay that belong to it under the current shard count.
SELECT {{message_columns}}, p.parked_at, p.replay_requested_at
FROM outbox.parked_messages AS p
JOIN outbox.messages AS m ON m.position = p.position
WHERE p.subscription_id = %(subscription)s AND p.replay_requested_at IS NOT NULL
  AND outbox.message_shard(m.partition_key, m.position, %(shard_count)s) = %(shard)s
ORDER BY m.transaction_id, m.position

-- write_shard_checkpoint --
-- Moves one shard's checkpoint forward and records its leader's runtime, only for the shard's current leader (fencing token) in the current epoch, and no further than its count's bound (a draining count's barrier: layout_read_bound's rule, from the row as locked); raise_shard_floor then moves the subscription's floor.
WITH in_epoch AS (
    -- FOR SHARE, not a join: a seek holds this row while it moves every shard, and a write
    -- that waits for it must see the seek's epoch. Joined unlocked, the row would be judged as
    -- the write first saw it, and after the wait PostgreSQL re-checks only the shard row: an
    -- old epoch's checkpoint then landed on top of the seek's. The same goes for the change
    -- of the shard count that the bound comes from: the locked row is the latest one.
    SELECT s.subscription_id,
           s.draining_shard_count = %(shard_count)s
           AND (%(transaction_id)s::text::xid8, %(position)s::bigint)
               > (s.shard_barrier_transaction_id, s.shard_barrier_position) AS past_barrier,
           s.shard_barrier_transaction_id, s.shard_barrier_position
    FROM outbox.subscriptions AS s
    WHERE s.subscription_id = %(subscription)s AND s.epoch = %(epoch)s
    FOR SHARE
),
target AS (
    -- A draining shard's checkpoint stops at the barrier: what lies after it is the new
    -- shards', and a checkpoint past it would let the end of the change pass too early.
    SELECT CASE WHEN past_barrier THEN shard_barrier_transaction_id
                ELSE %(transaction_id)s::text::xid8 END AS transaction_id,
           CASE WHEN past_barrier THEN shard_barrier_position
                ELSE %(position)s::bigint END AS position
    FROM in_epoch
),
fenced AS (
    UPDATE outbox.subscription_leaders AS l
    SET runtime = %(runtime)s::jsonb, runtime_at = clock_timestamp()
    WHERE l.subscription_id = %(subscription)s
      AND l.shard_count = %(shard_count)s AND l.shard = %(shard)s
      AND l.token = %(token)s AND l.holder = %(holder)s
    RETURNING l.subscription_id
)
UPDATE outbox.subscription_shards AS sh
SET last_processed_transaction_id = target.transaction_id,
    last_processed_position = target.position,
    updated_at = clock_timestamp()
FROM fenced, in_epoch, target
WHERE sh.subscription_id = fenced.subscription_id
  AND sh.subscription_id = in_epoch.subscription_id
  AND sh.shard_count = %(shard_count)s AND sh.shard = %(shard)s
  AND (sh.last_processed_transaction_id, sh.last_processed_position)
      <= (target.transaction_id, target.position)
RETURNING 1

-- raise_shard_floor --
-- Moves a sharded subscription's checkpoint up to the lowest of its shards' (never down), in the epoch of the shard write before it. A statement of its own after the shard's write: its snapshot sees every shard write committed before it, so the last of concurrent writers leaves the true floor. The epoch: a floor read before a seek and written after it (the update waited for the seek's lock, then re-checked only this row) would stand above the shards the seek moved back, and retention would drop what they have yet to deliver.
UPDATE outbox.subscriptions AS s
SET last_processed_transaction_id = floor.transaction_id,
    last_processed_position = floor.position,
    updated_at = clock_timestamp()
FROM (SELECT sh.last_processed_transaction_id AS transaction_id,
             sh.last_processed_position AS position
      FROM outbox.subscription_shards AS sh
      WHERE sh.subscription_id = %(subscription)s
      ORDER BY sh.last_processed_transaction_id, sh.last_processed_position
      LIMIT 1) AS floor
WHERE s.subscription_id = %(subscription)s AND s.epoch = %(epoch)s
  AND (s.last_processed_transaction_id, s.last_processed_position)
      < (floor.transaction_id, floor.position)

-- shard_change_drained --
-- During a change of the shard count, whether the old shards are done: no transaction that may still commit a message at or before the barrier runs (the safe frontier is past it: a writer older than the change may commit after it), no old shard has a message at or before the barrier after its checkpoint, and no lease of another count taken before the change (unbounded) is alive. No row when no change is draining.
SELECT pg_snapshot_xmin(pg_current_snapshot()) > s.shard_barrier_transaction_id
       AND NOT EXISTS (
           SELECT FROM outbox.subscription_leaders AS l
           WHERE l.subscription_id = s.subscription_id AND l.shard_count <> s.shard_count
             AND NOT l.bounded AND l.expires_at > clock_timestamp())
       AND NOT EXISTS (
           SELECT FROM outbox.subscription_shards AS sh
           WHERE sh.subscription_id = s.subscription_id
             AND sh.shard_count = s.draining_shard_count
             AND EXISTS (
                 SELECT FROM outbox.messages AS m
                 WHERE m.publication_id = s.publication_id
                   AND (m.transaction_id, m.position)
                       > (sh.last_processed_transaction_id, sh.last_processed_position)
                   AND (m.transaction_id, m.position)
                       <= (s.shard_barrier_transaction_id, s.shard_barrier_position)
                   AND outbox.message_shard(m.partition_key, m.position, sh.shard_count)
                       = sh.shard))
FROM outbox.subscriptions AS s
WHERE s.subscription_id = %(subscription)s AND s.draining_shard_count IS NOT NULL

-- lock_subscription --
-- Locks a subscription's row for a change of its shard layout (the end of a drain, a seek); returns its current count, the draining one and its epoch.
SELECT shard_count, draining_shard_count, epoch FROM outbox.subscriptions
WHERE subscription_id = %(subscription)s
FOR NO KEY UPDATE

-- drop_drained_shards --
-- Ends a drained change of the shard count: the old count's checkpoint rows go, and the subscription forgets the change.
WITH dropped AS (
    DELETE FROM outbox.subscription_shards AS sh
    USING outbox.subscriptions AS s
    WHERE s.subscription_id = %(subscription)s AND sh.subscription_id = s.subscription_id
      AND sh.shard_count = s.draining_shard_count
)
UPDATE outbox.subscriptions
SET draining_shard_count = NULL, shard_barrier_transaction_id = NULL,
    shard_barrier_position = NULL, updated_at = clock_timestamp()
WHERE subscription_id = %(subscription)s

-- make_plain --
-- After a change to one shard: its checkpoint becomes the subscription's own again, and its row goes.
WITH dropped AS (
    DELETE FROM outbox.subscription_shards
    WHERE subscription_id = %(subscription)s AND shard_count = 1
    RETURNING last_processed_transaction_id, last_processed_position
)
UPDATE outbox.subscriptions AS s
SET last_processed_transaction_id = dropped.last_processed_transaction_id,
    last_processed_position = dropped.last_processed_position
FROM dropped
WHERE s.subscription_id = %(subscription)s
  AND (s.last_processed_transaction_id, s.last_processed_position)
      <= (dropped.last_processed_transaction_id, dropped.last_processed_position)

-- leave_membership --
-- A process that stops leaves its subscription's group at once, so the others take its shards without waiting for its membership to run out.
DELETE FROM outbox.subscription_members
WHERE subscription_id = %(subscription)s AND member = %(member)s

-- shard_read_bound --
-- How far the shards of one count of a subscription may read now (layout_read_bound on its own; the largest place while the count is current, no row when the subscription is gone): a term's reads of the publication's archive take their bound from it, which the table read's statement carries itself.
{{layout_read_bound}}
