-- Every query the product runs, by name. A block starts with `-- name --`, then one comment
-- line saying what it does, then the statement. Loaded once by outbox/queries.py.

-- append_message --
-- Appends one message with the caller's message_id in one round trip (lock, lookup, insert: see outbox.append_message); returns its position, or the existing position for a repeated id.
SELECT outbox.append_message(%(publication)s, %(message_id)s, %(message_type)s, %(partition_key)s,
                             %(data)s::jsonb, %(headers)s::jsonb)

-- append_new_message --
-- Appends one message whose id was just generated (a fresh UUID cannot collide, so no conflict check).
INSERT INTO outbox.messages
    (publication_id, message_id, message_type, partition_key, data, headers)
VALUES
    (%(publication)s, %(message_id)s, %(message_type)s, %(partition_key)s,
     %(data)s::jsonb, %(headers)s::jsonb)
RETURNING position

-- append_new_messages --
-- Appends a batch whose ids were all just generated; returns (message_id, position) per row.
INSERT INTO outbox.messages
    (publication_id, message_id, message_type, partition_key, data, headers)
SELECT %(publication)s, message_id, message_type, partition_key, data::jsonb, headers::jsonb
FROM unnest(%(message_ids)s::text[], %(message_types)s::text[], %(partition_keys)s::text[],
            %(datas)s::text[], %(headers)s::text[])
     WITH ORDINALITY AS t(message_id, message_type, partition_key, data, headers, ordinal)
ORDER BY ordinal
RETURNING message_id, position

-- append_messages --
-- Appends a batch with some or all message_ids given (null: a fresh UUID) in one round trip (locks, lookup, insert: see outbox.append_messages); returns one array, the position of each message in the order given, existing positions for repeated ids.
SELECT outbox.append_messages(%(publication)s, %(message_ids)s::text[], %(message_types)s::text[],
                              %(partition_keys)s::text[], %(datas)s::text[]::jsonb[],
                              %(headers)s::text[]::jsonb[])

-- notify_publication --
-- Wakes listening pollers at commit; opt-in, because NOTIFY serialises committing writers.
SELECT pg_notify(%(channel)s, %(publication)s)

-- read_batch --
-- The snapshot-safe read: only rows below the oldest transaction still running, in (transaction_id, position) order after a checkpoint.
SELECT {{message_columns}}
FROM outbox.messages AS m
WHERE m.publication_id = %(publication)s
  AND (m.transaction_id, m.position) > (%(after_transaction_id)s::text::xid8, %(after_position)s::bigint)
  AND m.transaction_id < pg_snapshot_xmin(pg_current_snapshot())
ORDER BY m.transaction_id, m.position
LIMIT %(limit)s

-- read_leader_batch --
-- read_batch for a plain subscription's leader, each row led by the publication's retired-up-to mark (outbox.retired_positions; null when nothing was retired), read once per statement and in its snapshot: a leader whose read starts below it would skip what retention dropped, and stops instead. No row when nothing is read, which skips nothing: the first read that finds rows past a hole brings the mark along before any is delivered. No further than its one shard's bound (layout_read_bound, shard_count 1): once a change of the shard count is made, up to its barrier, though the term learns of the change only at its next renewal. No row either when the read server fails its proof (read_server_proven): the oldest_hidden_transaction question that follows every empty read carries the proof, and ends the term.
SELECT (SELECT r.transaction_id::text::bigint FROM outbox.retired_positions AS r
        WHERE r.publication_id = %(publication)s),
       (SELECT r.position FROM outbox.retired_positions AS r
        WHERE r.publication_id = %(publication)s),
       {{message_columns}}
FROM outbox.messages AS m
WHERE m.publication_id = %(publication)s
  AND (m.transaction_id, m.position) > (%(after_transaction_id)s::text::xid8, %(after_position)s::bigint)
  AND (m.transaction_id, m.position) <= ({{layout_read_bound}})
  AND m.transaction_id < pg_snapshot_xmin(pg_current_snapshot())
  AND {{read_server_proven}}
ORDER BY m.transaction_id, m.position
LIMIT %(limit)s

-- read_batch_with_retired --
-- read_batch for a catch-up subscription, with the publication's retired-up-to mark (outbox.retired_positions) in every row, and in one row of null message columns when nothing is read: one statement, so it locks outbox.messages before taking its snapshot and sees a retirement's drop and mark together or neither.
SELECT r.transaction_id::text::bigint, r.position, {{message_columns}}
FROM (SELECT 1) AS one
LEFT JOIN outbox.retired_positions AS r ON r.publication_id = %(publication)s
LEFT JOIN LATERAL (
    SELECT * FROM outbox.messages AS m
    WHERE m.publication_id = %(publication)s
      AND (m.transaction_id, m.position) > (%(after_transaction_id)s::text::xid8, %(after_position)s::bigint)
      AND m.transaction_id < pg_snapshot_xmin(pg_current_snapshot())
    ORDER BY m.transaction_id, m.position
    LIMIT %(limit)s
) AS m ON true
ORDER BY m.transaction_id, m.position

-- retired_up_to --
-- A publication's retired-up-to mark: the last message, in delivery order, of the partitions retention dropped (no row if none).
SELECT transaction_id::text::bigint, position FROM outbox.retired_positions
WHERE publication_id = %(publication)s

-- lock_messages_against_retirement --
-- Holds off a retirement's drop until this transaction ends (it needs ACCESS EXCLUSIVE), so a position checked against the mark and then stored is seen by the retirement's last check of its holders.
LOCK TABLE outbox.messages IN ACCESS SHARE MODE

-- safe_frontier --
-- The oldest transaction id still running anywhere in the cluster: nothing at or above it is safe to read yet.
SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint AS frontier

-- read_server_state --
-- Where a server stands, for reads from a hot standby (server_state_columns): which cluster it is a copy of and which server, whether it is a standby, its WAL position, when the last transaction it replayed committed, its clock, and its safe frontier.
SELECT {{server_state_columns}}

-- current_snapshot --
-- The parts of a snapshot taken now: the safe frontier, the next transaction id, and the transaction ids running between them (a catch-up subscription's backlog is what committed before it).
SELECT pg_snapshot_xmin(s)::text::bigint, pg_snapshot_xmax(s)::text::bigint,
       array(SELECT x::text::bigint FROM pg_snapshot_xip(s) AS x)
FROM pg_current_snapshot() AS s

-- create_subscription --
-- Creates a subscription of some shards starting after the given checkpoint (a sharded one's shard rows are inserted next, in the same transaction); returns nothing if the name is taken.
INSERT INTO outbox.subscriptions
    (subscription_id, publication_id, last_processed_transaction_id, last_processed_position, settings,
     shard_count)
VALUES (%(subscription)s, %(publication)s, %(transaction_id)s::text::xid8, %(position)s, %(settings)s::jsonb,
        %(shard_count)s)
ON CONFLICT (subscription_id) DO NOTHING
RETURNING subscription_id

-- get_subscription --
-- One subscription's publication, checkpoint, epoch, settings and shard layout.
SELECT subscription_id, publication_id, last_processed_transaction_id::text::bigint,
       last_processed_position, epoch, settings, replay_requests,
       shard_count, draining_shard_count,
       shard_barrier_transaction_id::text::bigint, shard_barrier_position
FROM outbox.subscriptions WHERE subscription_id = %(subscription)s

-- list_subscriptions --
-- Every subscription, by name, with get_subscription's columns.
SELECT subscription_id, publication_id, last_processed_transaction_id::text::bigint,
       last_processed_position, epoch, settings, replay_requests,
       shard_count, draining_shard_count,
       shard_barrier_transaction_id::text::bigint, shard_barrier_position
FROM outbox.subscriptions ORDER BY subscription_id

-- delete_subscription --
-- Deletes a subscription (its leader lease goes with it).
DELETE FROM outbox.subscriptions WHERE subscription_id = %(subscription)s RETURNING subscription_id

-- update_subscription_settings --
-- Replaces a subscription's settings; the daemon picks them up at its next leadership renewal.
UPDATE outbox.subscriptions SET settings = %(settings)s::jsonb, updated_at = clock_timestamp()
WHERE subscription_id = %(subscription)s RETURNING subscription_id

-- seek_subscription --
-- Moves a subscription's checkpoint and raises its epoch, so a running daemon drops what it read before.
UPDATE outbox.subscriptions
SET last_processed_transaction_id = %(transaction_id)s::text::xid8,
    last_processed_position = %(position)s,
    epoch = epoch + 1,
    updated_at = clock_timestamp()
WHERE subscription_id = %(subscription)s
RETURNING epoch

-- acquire_leadership --
-- Takes a shard's lease (a plain subscription's one lease is shard 0 of 1) when it is free, expired, or its holder's session is gone; a takeover raises the fencing token. Records whether the term is bounded (its shard belongs to a draining layout). Also returns how long the previous holder's lease had left (0 if none, expired or ours), which the new leader waits out before starting deliveries (see poller/daemon/term/self_fence.py).
WITH previous AS (
    -- A plain read: the statement's snapshot holds the row as it was before this takeover
    -- (FOR UPDATE would follow the update chain to this statement's own new version).
    SELECT holder, expires_at FROM outbox.subscription_leaders
    WHERE subscription_id = %(subscription)s
      AND shard_count = %(shard_count)s AND shard = %(shard)s
)
INSERT INTO outbox.subscription_leaders AS l
    (subscription_id, shard_count, shard, bounded, token, holder, host, pid, since, expires_at)
VALUES (%(subscription)s, %(shard_count)s, %(shard)s,
        coalesce((SELECT s.draining_shard_count = %(shard_count)s FROM outbox.subscriptions AS s
                  WHERE s.subscription_id = %(subscription)s), false),
        1, %(holder)s, %(host)s, %(pid)s, clock_timestamp(),
        clock_timestamp() + %(ttl_seconds)s * interval '1 second')
ON CONFLICT (subscription_id, shard_count, shard) DO UPDATE
SET token = l.token + 1, holder = excluded.holder, host = excluded.host, pid = excluded.pid,
    since = excluded.since, expires_at = excluded.expires_at, bounded = excluded.bounded
WHERE l.expires_at < clock_timestamp()
   OR l.holder = excluded.holder
   OR NOT EXISTS (SELECT FROM pg_stat_activity AS a WHERE a.application_name = l.holder)
RETURNING token,
          coalesce((SELECT extract(epoch FROM greatest(p.expires_at - clock_timestamp(), interval '0'))
                    FROM previous AS p WHERE p.holder <> %(holder)s), 0)::float8

-- renew_process_leases --
-- One process's renewal of all it holds of a subscription, in one statement (its renewer runs it every renew_every, see poller/daemon/process/lease_renewer.py): extends each lease named that the process still holds (its holder and that fencing token: also one that expired meanwhile, as nobody took it then: a taking changes the holder or raises the token) and records the runtime figures given with it (null: kept); renews the process's membership of a sharded subscription's group until it leaves (a plain subscription's processes compete for its one lease and need no row: none is written, no second commit to flush every second, and this member's expiry is reported as if renewed) and forgets members gone for a minute; returns one row per lease named (one with null lease columns when none is), saying whether it was renewed, with its shard's checkpoint, the subscription's epoch, settings, requests and shard layout (so seeks, updates and shard-count changes are noticed), every other member with when its membership runs out, this one's, and the database's clock as seconds since the epoch. No row when the subscription is gone.
WITH named AS (
    SELECT * FROM unnest(%(shard_counts)s::integer[], %(shards)s::integer[], %(tokens)s::bigint[],
                         %(runtimes)s::text[]::jsonb[]) AS n(shard_count, shard, token, runtime)
),
renewed AS (
    UPDATE outbox.subscription_leaders AS l
    SET expires_at = clock_timestamp() + %(ttl_seconds)s * interval '1 second',
        runtime = coalesce(n.runtime, l.runtime),
        runtime_at = CASE WHEN n.runtime IS NULL THEN l.runtime_at ELSE clock_timestamp() END
    FROM named AS n
    WHERE l.subscription_id = %(subscription)s
      AND l.shard_count = n.shard_count AND l.shard = n.shard
      AND l.token = n.token AND l.holder = %(holder)s
    RETURNING l.shard_count, l.shard
),
mine AS (
    INSERT INTO outbox.subscription_members AS m (subscription_id, member, host, pid, expires_at)
    SELECT s.subscription_id, %(holder)s, %(host)s, %(pid)s,
           clock_timestamp() + %(ttl_seconds)s * interval '1 second'
    FROM outbox.subscriptions AS s
    WHERE s.subscription_id = %(subscription)s AND %(member)s
      AND (s.shard_count > 1 OR s.draining_shard_count IS NOT NULL)
    ON CONFLICT (subscription_id, member) DO UPDATE SET expires_at = excluded.expires_at
    RETURNING extract(epoch FROM m.expires_at)::float8 AS expires_at
),
gone AS (
    DELETE FROM outbox.subscription_members
    WHERE subscription_id = %(subscription)s
      AND expires_at < clock_timestamp() - interval '1 minute'
)
SELECT n.shard_count, n.shard, n.token, r.shard IS NOT NULL,
       s.epoch,
       coalesce(sh.last_processed_transaction_id, s.last_processed_transaction_id)::text::bigint,
       coalesce(sh.last_processed_position, s.last_processed_position),
       s.settings, s.replay_requests,
       s.skip_to_transaction_id::text::bigint, s.skip_to_position, s.skip_epoch,
       s.shard_count, s.draining_shard_count,
       s.shard_barrier_transaction_id::text::bigint, s.shard_barrier_position,
       array(SELECT m.member FROM outbox.subscription_members AS m
             WHERE m.subscription_id = s.subscription_id AND m.member <> %(holder)s
             ORDER BY m.member),
       array(SELECT extract(epoch FROM m.expires_at)::float8
             FROM outbox.subscription_members AS m
             WHERE m.subscription_id = s.subscription_id AND m.member <> %(holder)s
             ORDER BY m.member),
       coalesce((SELECT expires_at FROM mine),
                extract(epoch FROM clock_timestamp())::float8 + %(ttl_seconds)s),
       extract(epoch FROM clock_timestamp())::float8
FROM outbox.subscriptions AS s
LEFT JOIN named AS n ON true
LEFT JOIN renewed AS r ON r.shard_count = n.shard_count AND r.shard = n.shard
LEFT JOIN outbox.subscription_shards AS sh
       ON sh.subscription_id = s.subscription_id
      AND sh.shard_count = n.shard_count AND sh.shard = n.shard
WHERE s.subscription_id = %(subscription)s

-- release_leadership --
-- Gives the lease up at shutdown so a standby takes over at once.
DELETE FROM outbox.subscription_leaders
WHERE subscription_id = %(subscription)s AND shard_count = %(shard_count)s AND shard = %(shard)s
  AND token = %(token)s AND holder = %(holder)s

-- write_checkpoint --
-- Moves a plain subscription's checkpoint forward and records the leader's runtime, only for the current leader (fencing token) of its one shard (1 of 1) in the current epoch, and only while the subscription is plain (a change of its shard count moves checkpoints to outbox.subscription_shards: write_shard_checkpoint).
WITH fenced AS (
    UPDATE outbox.subscription_leaders AS l
    SET runtime = %(runtime)s::jsonb, runtime_at = clock_timestamp()
    WHERE l.subscription_id = %(subscription)s AND l.shard_count = %(shard_count)s AND l.shard = %(shard)s
      AND l.shard_count = 1
      AND l.token = %(token)s AND l.holder = %(holder)s
    RETURNING l.subscription_id
)
UPDATE outbox.subscriptions AS s
SET last_processed_transaction_id = %(transaction_id)s::text::xid8,
    last_processed_position = %(position)s,
    updated_at = clock_timestamp()
FROM fenced
WHERE s.subscription_id = fenced.subscription_id AND s.epoch = %(epoch)s
  AND s.shard_count = 1 AND s.draining_shard_count IS NULL
  AND (s.last_processed_transaction_id, s.last_processed_position)
      <= (%(transaction_id)s::text::xid8, %(position)s::bigint)
RETURNING 1

-- oldest_hidden_transaction --
-- Whether the read server passed its proof (read_server_proven), and the oldest committed transaction after a checkpoint that the safe frontier still hides (null if none, or if it failed).
SELECT proof.proven, hidden.transaction_id
FROM (SELECT {{read_server_proven}} AS proven) AS proof
CROSS JOIN LATERAL (
    SELECT min(m.transaction_id)::text::bigint AS transaction_id
    FROM outbox.messages AS m
    WHERE proof.proven
      AND m.publication_id = %(publication)s
      AND (m.transaction_id, m.position) > (%(after_transaction_id)s::text::xid8, %(after_position)s::bigint)
      AND m.transaction_id >= pg_snapshot_xmin(pg_current_snapshot())
) AS hidden

-- blocking_transactions_before --
-- The sessions and prepared transactions, in any database, that hold back rows at or after a transaction id; the start of each session's SQL (passwords redacted by the view) only %(with_query)s: another session's SQL is no business of the daemon's log.
SELECT kind, pid, database, user_name, application_name, client_address, state,
       extract(epoch FROM transaction_age)::float8,
       CASE WHEN %(with_query)s THEN query_start END
FROM outbox.blocking_transactions
WHERE transaction_id < %(transaction_id)s::text::xid8
ORDER BY transaction_start

-- park_message --
-- Records a stream message the subscription gave up on, only for the current leader (fencing token) and in the epoch the park was decided in; a repeated park (a seek re-read it) updates the row and keeps a replay request on it; returns the attempts in all. FOR SHARE makes a takeover or a seek wait for this write, or this write see theirs.
WITH fenced AS (
    SELECT s.subscription_id
    FROM outbox.subscription_leaders AS l
    JOIN outbox.subscriptions AS s ON s.subscription_id = l.subscription_id
    WHERE l.subscription_id = %(subscription)s AND l.shard_count = %(shard_count)s AND l.shard = %(shard)s
      AND l.token = %(token)s AND l.holder = %(holder)s
      AND s.epoch = %(epoch)s
    FOR SHARE OF l, s
)
INSERT INTO outbox.parked_messages (subscription_id, position, transaction_id, attempts, last_error)
SELECT fenced.subscription_id, %(position)s, %(transaction_id)s::text::xid8, %(attempts)s, %(last_error)s
FROM fenced
ON CONFLICT (subscription_id, position) DO UPDATE
SET attempts = outbox.parked_messages.attempts + excluded.attempts,
    last_error = excluded.last_error, parked_at = now()
RETURNING attempts

-- repark_replayed_message --
-- Parks a replayed message again (its replay failed), only for the current leader (fencing token, locked as in park_message), whatever the epoch (replays outlive seeks): the row's attempts grow by the replay's, and the replay request it read is cleared (one made while the replay ran stays, so that replay follows). No row, and nothing written, when the row is gone: an operator purged it while it was replayed. Returns the attempts in all.
WITH fenced AS (
    SELECT l.subscription_id FROM outbox.subscription_leaders AS l
    WHERE l.subscription_id = %(subscription)s AND l.shard_count = %(shard_count)s AND l.shard = %(shard)s
      AND l.token = %(token)s AND l.holder = %(holder)s
    FOR SHARE
)
UPDATE outbox.parked_messages AS p
SET attempts = p.attempts + %(attempts)s, last_error = %(last_error)s, parked_at = now(),
    replay_requested_at = CASE WHEN p.replay_requested_at <= %(replay_requested_at)s THEN NULL
                               ELSE p.replay_requested_at END
FROM fenced
WHERE p.subscription_id = fenced.subscription_id AND p.position = %(position)s
RETURNING p.attempts

-- unpark_message --
-- Deletes a parked row once its replay was acknowledged, only for the current leader (fencing token, locked as in park_message), and only the row that replay read: if the position was parked again meanwhile (a seek re-read it and it failed again), that newer row stays.
WITH fenced AS (
    SELECT l.subscription_id FROM outbox.subscription_leaders AS l
    WHERE l.subscription_id = %(subscription)s AND l.shard_count = %(shard_count)s AND l.shard = %(shard)s
      AND l.token = %(token)s AND l.holder = %(holder)s
    FOR SHARE
)
DELETE FROM outbox.parked_messages AS p
USING fenced
WHERE p.subscription_id = fenced.subscription_id AND p.position = %(position)s
  AND p.parked_at = %(parked_at)s
RETURNING 1

-- list_parked --
-- A subscription's parked messages after a place in delivery order (a page of them), with their type and error, in delivery order, each with its shard under the current shard count (the shard whose leader replays it) and when a replay of it was asked for (null when none waits).
SELECT p.position, p.transaction_id::text::bigint, m.message_type, m.message_id, p.attempts,
       p.last_error, p.parked_at,
       outbox.message_shard(m.partition_key, m.position, s.shard_count), p.replay_requested_at
FROM outbox.parked_messages AS p
JOIN outbox.messages AS m ON m.position = p.position
JOIN outbox.subscriptions AS s ON s.subscription_id = p.subscription_id
WHERE p.subscription_id = %(subscription)s
  AND (p.transaction_id, p.position)
      > (%(after_transaction_id)s::text::xid8, %(after_position)s::bigint)
ORDER BY p.transaction_id, p.position
LIMIT %(limit)s

-- purge_parked --
-- Drops a subscription's parked messages for good: every one, or the one at a position. Returns the positions dropped.
DELETE FROM outbox.parked_messages
WHERE subscription_id = %(subscription)s
  AND (%(position)s::bigint IS NULL OR position = %(position)s)
RETURNING position

-- read_parked_messages --
-- The messages behind a subscription's parked rows that a replay was asked for, in delivery order, each with its row's parked_at (which a later park of the same position changes) and when the replay was asked for.
SELECT {{message_columns}}, p.parked_at, p.replay_requested_at
FROM outbox.parked_messages AS p
JOIN outbox.messages AS m ON m.position = p.position
WHERE p.subscription_id = %(subscription)s AND p.replay_requested_at IS NOT NULL
ORDER BY m.transaction_id, m.position

-- mark_parked_for_replay --
-- Asks for a replay of a subscription's parked messages (every one, or the one at a position), each applied by the leader of the message's shard under the current count; returns each message's place and that shard.
UPDATE outbox.parked_messages AS p
SET replay_requested_at = clock_timestamp()
FROM outbox.messages AS m, outbox.subscriptions AS s
WHERE p.subscription_id = %(subscription)s
  AND (%(position)s::bigint IS NULL OR p.position = %(position)s)
  AND m.position = p.position AND s.subscription_id = p.subscription_id
RETURNING p.transaction_id::text::bigint, p.position,
          outbox.message_shard(m.partition_key, m.position, s.shard_count), s.shard_count

-- request_replay --
-- Tells the subscription's leaders that replays were asked for: each reads its shard's marked parked rows at its next lease renewal (a new leader reads them when it starts).
UPDATE outbox.subscriptions SET replay_requests = replay_requests + 1, updated_at = clock_timestamp()
WHERE subscription_id = %(subscription)s RETURNING replay_requests

-- parked_message_by_id --
-- The place of a subscription's parked message with a message id of its publication (no row if none is parked).
SELECT p.transaction_id::text::bigint, p.position
FROM outbox.parked_messages AS p
JOIN outbox.subscriptions AS s ON s.subscription_id = p.subscription_id
JOIN outbox.messages AS m ON m.position = p.position
WHERE p.subscription_id = %(subscription)s
  AND m.publication_id = s.publication_id AND m.message_id = %(message_id)s

-- leader_alive --
-- Whether a daemon currently holds the subscription's lease.
SELECT coalesce(bool_or(expires_at > clock_timestamp()), false)
FROM outbox.subscription_leaders WHERE subscription_id = %(subscription)s

-- next_transaction_id --
-- The transaction id the cluster assigns next: a checkpoint at or above it would hide every message written from now on.
SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint AS next_transaction_id

-- subscription_status_with_hidden --
-- The operator's view of every subscription, with the oldest transaction the safe frontier still hides (to name its blockers), its messages backing off and parked, the oldest parked one, and what kind of consumer it is (a Spark query's row: when it last recorded a batch).
SELECT v.subscription_id, v.publication_id, v.checkpoint_transaction_id::text::bigint,
       v.checkpoint_position, v.messages_behind,
       extract(epoch FROM v.oldest_undelivered_age)::float8,
       v.leader_host, v.leader_pid, v.leader_since, v.leader_alive,
       v.oldest_hidden_transaction_id::text::bigint, v.destination_unavailable,
       v.retry_queue, coalesce(v.parked_messages, 0),
       oldest_parked.transaction_id::text::bigint, oldest_parked.position,
       extract(epoch FROM v.oldest_parked_age)::float8,
       s.settings ->> 'kind', s.updated_at
FROM outbox.subscription_status AS v
JOIN outbox.subscriptions AS s ON s.subscription_id = v.subscription_id
LEFT JOIN LATERAL (
    SELECT p.transaction_id, p.position FROM outbox.parked_messages AS p
    WHERE p.subscription_id = v.subscription_id
    ORDER BY p.parked_at, p.position LIMIT 1
) AS oldest_parked ON true
ORDER BY v.subscription_id

-- get_message_by_id --
-- One message of a publication by its message id, with its place in delivery order.
SELECT m.position, m.transaction_id::text::bigint, m.publication_id, m.message_id,
       m.message_type, m.partition_key, m.data::text, m.headers::text, m.appended_at
FROM outbox.messages AS m
WHERE m.publication_id = %(publication)s AND m.message_id = %(message_id)s

-- get_message_at_position --
-- One message of a publication at a (transaction_id, position).
SELECT m.position, m.transaction_id::text::bigint, m.publication_id, m.message_id,
       m.message_type, m.partition_key, m.data::text, m.headers::text, m.appended_at
FROM outbox.messages AS m
WHERE m.publication_id = %(publication)s AND m.position = %(position)s
  AND m.transaction_id = %(transaction_id)s::text::xid8

-- get_message_by_position --
-- One message of a publication at a position alone (what append returns): positions are unique across the publications.
SELECT m.position, m.transaction_id::text::bigint, m.publication_id, m.message_id,
       m.message_type, m.partition_key, m.data::text, m.headers::text, m.appended_at
FROM outbox.messages AS m
WHERE m.publication_id = %(publication)s AND m.position = %(position)s

-- delete_publication_messages --
-- Deletes every message of a publication (the demo cleans up after itself with it).
DELETE FROM outbox.messages WHERE publication_id = %(publication)s

-- insert_consumer_position --
-- A catch-up consumer's first position in {table}, inside the consumer's own transaction; returns nothing when a position is stored already (another process consumes under the same name), so the caller can roll back. A concurrent first store waits for this one's commit, then finds the row.
INSERT INTO {table} (consumer_name, transaction_id, position, updated_at)
VALUES (%(consumer)s, %(transaction_id)s::text::xid8, %(position)s, now())
ON CONFLICT (consumer_name) DO NOTHING
RETURNING 1

-- store_consumer_position --
-- Compare-and-set of a catch-up consumer's position in {table}, inside the consumer's own transaction: moves it only from the position this consumer started from (loaded, or stored last); returns nothing when another process moved it meanwhile, so the caller can roll back. A concurrent store waits on the row lock, then compares with what committed.
UPDATE {table} AS p
SET transaction_id = %(transaction_id)s::text::xid8, position = %(position)s, updated_at = now()
WHERE p.consumer_name = %(consumer)s
  AND (p.transaction_id, p.position)
      = (%(previous_transaction_id)s::text::xid8, %(previous_position)s::bigint)
RETURNING 1

-- load_consumer_position --
-- A catch-up consumer's stored position in {table}, or no row if it never stored one.
SELECT transaction_id::text::bigint, position FROM {table} WHERE consumer_name = %(consumer)s
-- create_message_partitions --
-- Creates the partitions of outbox.messages needed up to partitions_ahead past the next position (attached, so writers are not blocked); returns their names.
SELECT name FROM outbox.create_message_partitions(%(partition_size)s, %(partitions_ahead)s) AS name

-- close_message_partition_by_age --
-- Closes the partition taking the next position once its first message is older than the minimum age: the next position jumps to the partition made ahead (see outbox.close_message_partition_by_age); returns the closed partition's name, or null.
SELECT outbox.close_message_partition_by_age(
    %(minimum_age_seconds)s * interval '1 second', %(lock_wait_seconds)s * interval '1 second')

-- partition_holders --
-- Every partition, oldest first: its positions, message count and first message's append time, the next position to be handed out, the database's clock, and what holds it back under the minimum age (the first reason found: unfilled, subscription, spark, consumer, parked, minimum age; null columns: nothing) and since when.
SELECT p.partition_name, p.first_position, p.end_position, counted.messages,
       first_message.appended_at, outbox.next_message_position(), clock_timestamp(),
       h.kind, h.holder, h.held_since
FROM outbox.message_partitions() AS p
LEFT JOIN LATERAL outbox.message_partition_holder(
    p.first_position, p.end_position, %(minimum_age_seconds)s * interval '1 second') AS h ON true
LEFT JOIN LATERAL (
    SELECT m.appended_at FROM outbox.messages AS m
    WHERE m.position >= p.first_position AND m.position < p.end_position
    ORDER BY m.position LIMIT 1
) AS first_message ON true
CROSS JOIN LATERAL (
    SELECT count(*) AS messages FROM outbox.messages AS m
    WHERE m.position >= p.first_position AND m.position < p.end_position
) AS counted
ORDER BY p.first_position

-- retirable_message_partitions --
-- The partitions every subscription, consumer and parked message is done with and older than the minimum age, oldest first, with their message counts.
SELECT partition_name, first_position, end_position, messages
FROM outbox.retirable_message_partitions(%(minimum_age_seconds)s * interval '1 second')

-- retire_message_partition --
-- Drops one partition if it may still be retired (re-checked under its locks); returns its message count, or null when something holds it now.
SELECT outbox.retire_message_partition(
    %(partition)s, %(minimum_age_seconds)s * interval '1 second',
    %(lock_wait_seconds)s * interval '1 second')

-- retention_holders --
-- Per partition, oldest first, what holds it back (a subscription, a Spark query, a consumer, a parked message) and since when.
SELECT partition_name, first_position, end_position, held_by_kind, held_by, held_since,
       extract(epoch FROM clock_timestamp() - held_since)::float8
FROM outbox.retention_status
WHERE held_by_kind <> 'unfilled'
ORDER BY first_position

-- partition_holds_publications --
-- Whether a partition holds a message of any of the given publications: retention keeps a partition holding messages of an archive whose files it found missing or changed.
SELECT EXISTS (
    SELECT FROM outbox.messages AS m
    WHERE m.position >= %(first_position)s AND m.position < %(end_position)s
      AND m.publication_id = ANY(%(publications)s)
)

-- try_retention_lock --
-- Takes the session lock that lets one daemon of the database run retention at a time; false if another holds it.
SELECT pg_try_advisory_lock(hashtextextended('outbox.retention', 0))

-- release_retention_lock --
-- Gives the retention lock back.
SELECT pg_advisory_unlock(hashtextextended('outbox.retention', 0))
-- request_skip --
-- Asks the subscription's leader to skip every message up to a position past the stored checkpoint, in the current epoch; returns the epoch, or nothing when the position is not past the checkpoint or a request of this epoch already goes further.
UPDATE outbox.subscriptions AS s
SET skip_to_transaction_id = %(transaction_id)s::text::xid8, skip_to_position = %(position)s,
    skip_epoch = s.epoch, updated_at = clock_timestamp()
WHERE s.subscription_id = %(subscription)s
  AND (s.last_processed_transaction_id, s.last_processed_position)
      < (%(transaction_id)s::text::xid8, %(position)s::bigint)
  AND (s.skip_epoch IS DISTINCT FROM s.epoch
       OR (s.skip_to_transaction_id, s.skip_to_position)
          < (%(transaction_id)s::text::xid8, %(position)s::bigint))
RETURNING s.epoch

-- settle_skip_request --
-- Clears the skip request a leader saw once the stored checkpoint has reached it, or a seek made it void (an older epoch); only for the current leader (fencing token), and never a newer request.
UPDATE outbox.subscriptions AS s
SET skip_to_transaction_id = NULL, skip_to_position = NULL, skip_epoch = NULL
FROM outbox.subscription_leaders AS l
WHERE s.subscription_id = %(subscription)s AND l.subscription_id = s.subscription_id
  AND l.shard_count = %(shard_count)s AND l.shard = %(shard)s
  AND l.token = %(token)s AND l.holder = %(holder)s
  AND s.skip_to_transaction_id = %(transaction_id)s::text::xid8
  AND s.skip_to_position = %(position)s AND s.skip_epoch = %(epoch)s
  AND (s.skip_epoch < s.epoch
       OR (s.last_processed_transaction_id, s.last_processed_position)
          >= (s.skip_to_transaction_id, s.skip_to_position))
RETURNING 1

-- get_skip_request --
-- A subscription's pending skip request (target and epoch), null columns when none.
SELECT skip_to_transaction_id::text::bigint, skip_to_position, skip_epoch
FROM outbox.subscriptions WHERE subscription_id = %(subscription)s

-- get_parked_message --
-- One parked message of a subscription: the whole message, then its parked row's attempts, last error and parked time.
SELECT {{message_columns}}, p.attempts, p.last_error, p.parked_at
FROM outbox.parked_messages AS p
JOIN outbox.messages AS m ON m.position = p.position
WHERE p.subscription_id = %(subscription)s AND p.position = %(position)s

-- first_message_appended_since --
-- The first message of a publication, in delivery order, appended at or after a time (null columns if none), and the database's clock.
SELECT first.transaction_id, first.position, clock_timestamp()
FROM (SELECT 1) AS one
LEFT JOIN LATERAL (
    SELECT m.transaction_id::text::bigint AS transaction_id, m.position
    FROM outbox.messages AS m
    WHERE m.publication_id = %(publication)s AND m.appended_at >= %(since)s
    ORDER BY m.transaction_id, m.position
    LIMIT 1
) AS first ON true
-- metrics_subscription_figures --
-- What a daemon's metrics show of its subscriptions, from the status view: the stored checkpoint, messages and seconds behind it, parked messages and the oldest one's age (0 when none).
SELECT subscription_id, checkpoint_transaction_id::text::bigint, checkpoint_position,
       messages_behind, coalesce(extract(epoch FROM oldest_undelivered_age), 0)::float8,
       parked_messages, coalesce(extract(epoch FROM oldest_parked_age), 0)::float8
FROM outbox.subscription_status
WHERE subscription_id = ANY(%(subscriptions)s)

-- safe_frontier_holder_age --
-- Seconds the transaction with the oldest running xid (the one that holds back the safe frontier) has been open; no row when none, a null age when its session is hidden (pg_read_all_stats).
SELECT extract(epoch FROM transaction_age)::float8
FROM outbox.blocking_transactions
ORDER BY transaction_id
LIMIT 1

-- metrics_blocked_deliveries --
-- Per subscription, the committed messages after its checkpoint that the safe frontier still hides (they wait for older transactions to end), and up to %(per_subscription)s of the open transactions that hold them back, oldest first, open for at least %(minimum_age_seconds)s s (null columns when none is: none, or only sessions this role cannot see, which need pg_read_all_stats).
SELECT s.subscription_id, hidden.messages, b.kind, b.pid, b.application_name, b.user_name,
       b.database, extract(epoch FROM b.transaction_age)::float8
FROM outbox.subscriptions AS s
CROSS JOIN LATERAL (
    SELECT count(*) AS messages, min(m.transaction_id) AS oldest_transaction_id
    FROM outbox.messages AS m
    WHERE m.publication_id = s.publication_id
      AND (m.transaction_id, m.position)
          > (s.last_processed_transaction_id, s.last_processed_position)
      AND m.transaction_id >= pg_snapshot_xmin(pg_current_snapshot())
) AS hidden
LEFT JOIN LATERAL (
    SELECT b.kind, b.pid, b.application_name, b.user_name, b.database, b.transaction_age
    FROM outbox.blocking_transactions AS b
    WHERE b.transaction_id < hidden.oldest_transaction_id
      AND b.transaction_age >= %(minimum_age_seconds)s * interval '1 second'
    ORDER BY b.transaction_start
    LIMIT %(per_subscription)s
) AS b ON true
WHERE s.subscription_id = ANY(%(subscriptions)s)

-- metrics_retention_holders --
-- Per kind of holder (subscription, spark, consumer, parked), the one that holds the oldest partition that kind holds, and seconds since it holds it (its oldest message there appended, or parked): outbox.retention_status read through its functions, which every role may call.
SELECT DISTINCT ON (h.kind) h.kind, h.holder,
       extract(epoch FROM clock_timestamp() - h.held_since)::float8
FROM outbox.message_partitions() AS p
CROSS JOIN LATERAL outbox.message_partition_holder(p.first_position, p.end_position, NULL) AS h
WHERE h.kind <> 'unfilled' AND h.held_since IS NOT NULL
ORDER BY h.kind, p.first_position
