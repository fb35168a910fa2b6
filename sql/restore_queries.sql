-- The statements that notice a database restored into another cluster and rebase its stored
-- transaction ids (poller/store/restore_check.py, poller/store/rebase_store.py). Same format
-- as queries.sql: `-- name --`, one line saying what it does, the statement. `{name}` marks an
-- identifier or literal composed with psycopg.sql.

-- transaction_ids_ahead --
-- For one subscription: the highest transaction id its checkpoint, its shards' checkpoints and barrier, its publication's messages and its parked rows hold, and the next id this cluster assigns; a stored one at or above that next id came from another cluster.
SELECT greatest(s.last_processed_transaction_id, s.shard_barrier_transaction_id,
                (SELECT max(sh.last_processed_transaction_id) FROM outbox.subscription_shards AS sh
                 WHERE sh.subscription_id = s.subscription_id),
                (SELECT max(m.transaction_id) FROM outbox.messages AS m
                 WHERE m.publication_id = s.publication_id),
                (SELECT max(p.transaction_id) FROM outbox.parked_messages AS p
                 WHERE p.subscription_id = s.subscription_id))::text::bigint,
       pg_snapshot_xmax(pg_current_snapshot())::text::bigint
FROM outbox.subscriptions AS s
WHERE s.subscription_id = %(subscription)s

-- rebase_lock_table --
-- Stops writes to one outbox table until the rebase commits (reads go on); waits for the writers already in it.
LOCK TABLE {table} IN EXCLUSIVE MODE

-- rebase_xid_columns --
-- Every stored transaction id column of the outbox besides messages.transaction_id: checkpoints (the subscriptions' and their shards'), shard barriers, parked rows, consumer positions, and whatever a later migration adds.
SELECT c.relname::text, a.attname::text
FROM pg_attribute AS a JOIN pg_class AS c ON c.oid = a.attrelid
WHERE c.relnamespace = 'outbox'::regnamespace AND c.relkind IN ('r', 'p') AND NOT c.relispartition
  AND a.atttypid = 'xid8'::regtype AND a.attnum > 0 AND NOT a.attisdropped
  AND (c.relname, a.attname) <> ('messages', 'transaction_id')
ORDER BY 1, 2

-- rebase_live_leaders --
-- The subscriptions, and their shards, a daemon leads right now (lease not expired, holder still connected), which a rebase must not run under.
SELECT l.subscription_id, l.shard_count, l.shard, l.host, l.pid
FROM outbox.subscription_leaders AS l
WHERE l.expires_at > clock_timestamp()
  AND EXISTS (SELECT FROM pg_stat_activity AS a WHERE a.application_name = l.holder)
ORDER BY l.subscription_id, l.shard_count, l.shard

-- rebase_last_restored_position --
-- The last position a restore wrote. A row written here holds in xmin its transaction's id, or in a subtransaction (SAVEPOINT, an EXCEPTION block) the subtransaction's, which is assigned after its transaction's: never an id older than its transaction_id. So a row whose xmin is older proves its writer (one restoring COPY) a restore, and every row that writer wrote was restored; positions continue after the restored ones, so every later row was written here.
WITH restoring AS (
    SELECT DISTINCT m.xmin
    FROM outbox.messages AS m,
         (SELECT pg_snapshot_xmax(pg_current_snapshot()) AS next_id) AS n
    WHERE outbox.widen_xid_around(m.xmin, n.next_id) < m.transaction_id
)
SELECT coalesce(max(m.position), 0) FROM outbox.messages AS m
WHERE m.xmin IN (SELECT xmin FROM restoring)

-- rebase_written_here_among_restored --
-- Messages written here since the restore whose ids sort below a restored message's: written while restored ids were ahead, before the cluster's counter passed them. Per subscription of their publication, how many of them sort at or behind its checkpoint, which is never delivered (the first row, subscription null, counts them all). A sharded subscription's checkpoint is the floor of its shards; a message is also behind when it is at or behind its own shard's checkpoint (during a change of the count, its shard among the draining count: the new count's shards wait at the barrier, and the old ones deliver everything up to it).
WITH restored AS (
    SELECT max(transaction_id) AS highest FROM outbox.messages WHERE position <= %(last_restored)s
),
misplaced AS (
    SELECT m.publication_id, m.transaction_id, m.position, m.partition_key
    FROM outbox.messages AS m, restored
    WHERE m.position > %(last_restored)s AND m.transaction_id < restored.highest
)
SELECT NULL::text AS subscription_id, count(*), min(position), max(position) FROM misplaced
UNION ALL
SELECT s.subscription_id, count(*), min(m.position), max(m.position)
FROM outbox.subscriptions AS s
JOIN misplaced AS m ON m.publication_id = s.publication_id
    AND ((m.transaction_id, m.position)
             <= (s.last_processed_transaction_id, s.last_processed_position)
         OR EXISTS (
             SELECT FROM outbox.subscription_shards AS sh
             WHERE sh.subscription_id = s.subscription_id
               AND (s.draining_shard_count IS NULL OR sh.shard_count = s.draining_shard_count)
               AND outbox.message_shard(m.partition_key, m.position, sh.shard_count) = sh.shard
               AND (m.transaction_id, m.position)
                   <= (sh.last_processed_transaction_id, sh.last_processed_position)))
GROUP BY s.subscription_id
ORDER BY 1 NULLS FIRST

-- rebase_create_map --
-- The rewrite, one row per stored transaction id: restored ids keep their order and all come before the ids of messages written here.
CREATE TEMPORARY TABLE outbox_rebase_map (
    old xid8 NOT NULL,
    written_here boolean NOT NULL,
    new xid8 NULL,
    PRIMARY KEY (written_here, old)
) ON COMMIT DROP

-- rebase_collect_messages --
-- The transaction ids of the messages, marked restored or written here; 0 to 2 are no transaction's and stay.
INSERT INTO outbox_rebase_map (old, written_here)
SELECT DISTINCT transaction_id, position > %(last_restored)s
FROM outbox.messages
WHERE transaction_id >= '3'
ON CONFLICT DO NOTHING

-- rebase_collect_column --
-- The transaction ids one other column holds (checkpoints, parked rows...), all of them restored ones.
INSERT INTO outbox_rebase_map (old, written_here)
SELECT DISTINCT {column}, false FROM {table} WHERE {column} >= '3'
ON CONFLICT DO NOTHING

-- rebase_plan --
-- How many ids the rewrite needs (restored ones among them), the highest restored one, and the rebase's own transaction id (which assigns it: every rewritten id goes below it).
SELECT count(*), count(*) FILTER (WHERE NOT written_here),
       coalesce(max(old) FILTER (WHERE NOT written_here), '0')::text::bigint,
       pg_current_xact_id()::text::bigint
FROM outbox_rebase_map

-- rebase_assign --
-- Numbers the ids consecutively from a base, restored ones first, each group in its old order.
UPDATE outbox_rebase_map AS m
SET new = (%(base)s::bigint + r.rank - 1)::text::xid8
FROM (SELECT written_here, old, row_number() OVER (ORDER BY written_here, old) AS rank
      FROM outbox_rebase_map) AS r
WHERE (m.written_here, m.old) = (r.written_here, r.old)

-- rebase_messages --
-- Rewrites the messages' transaction ids; returns how many rows changed.
WITH rewritten AS (
    UPDATE outbox.messages AS m
    SET transaction_id = map.new
    FROM outbox_rebase_map AS map
    WHERE map.old = m.transaction_id AND map.written_here = (m.position > %(last_restored)s)
      AND map.new <> map.old
    RETURNING 1
)
SELECT count(*) FROM rewritten

-- rebase_column --
-- Rewrites one other column's transaction ids (all restored ones).
UPDATE {table} AS t
SET {column} = map.new
FROM outbox_rebase_map AS map
WHERE NOT map.written_here AND map.old = t.{column} AND map.new <> map.old

-- rebase_raise_epochs --
-- Raises every subscription's epoch, as a seek does: anything a daemon read before the rebase is dropped, never delivered nor checkpointed.
UPDATE outbox.subscriptions SET epoch = epoch + 1, updated_at = clock_timestamp()

-- advance_transaction_ids --
-- Uses up transaction ids, one short transaction each, so the cluster's counter makes room below it for the rewritten ids (run with autocommit; writes nothing).
DO $advance$
BEGIN
    FOR i IN 1..{count} LOOP
        PERFORM pg_current_xact_id();
        COMMIT;
    END LOOP;
END
$advance$
