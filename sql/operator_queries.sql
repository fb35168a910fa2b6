-- What the operator façade (poller/operations/) reads for its front ends beyond the command
-- line's verbs: what the connected role may do, what an action would change, and the figures
-- the console samples. In the format of queries.sql.

-- role_privileges --
-- The role this session acts as and its database; whether it may read messages (their data, headers and the errors stored with them); and whether it may change subscriptions and parked messages (seek, skip, replay, purge): the schema's owner may, outbox_poller and outbox_reader may not.
SELECT current_user::text, current_database()::text,
       has_table_privilege('outbox.messages', 'SELECT'),
       has_table_privilege('outbox.subscriptions', 'UPDATE')
       AND has_table_privilege('outbox.subscription_shards', 'UPDATE')
       AND has_table_privilege('outbox.parked_messages', 'UPDATE, DELETE')

-- messages_between --
-- How many messages of a publication come after one place and up to another in delivery order, counting only one shard's under a shard count above 1: what a seek delivers again or passes over, what a skip finishes, what a shard's checkpoint passed between two samples.
SELECT count(*)
FROM outbox.messages AS m
WHERE m.publication_id = %(publication)s
  AND (m.transaction_id, m.position)
      > (%(after_transaction_id)s::text::xid8, %(after_position)s::bigint)
  AND (m.transaction_id, m.position)
      <= (%(up_to_transaction_id)s::text::xid8, %(up_to_position)s::bigint)
  AND (%(shard_count)s::integer = 1
       OR outbox.message_shard(m.partition_key, m.position, %(shard_count)s::integer)
          = %(shard)s::integer)

-- shard_checkpoints --
-- Each shard's checkpoint of every subscription, or of the one named (a plain subscription: its one shard, 0 of 1, from its own row), with the subscription's publication.
SELECT s.subscription_id, s.publication_id, 1, 0,
       s.last_processed_transaction_id::text::bigint, s.last_processed_position
FROM outbox.subscriptions AS s
WHERE (%(subscription)s::text IS NULL OR s.subscription_id = %(subscription)s)
  AND NOT EXISTS (SELECT FROM outbox.subscription_shards AS sh
                  WHERE sh.subscription_id = s.subscription_id)
UNION ALL
SELECT sh.subscription_id, s.publication_id, sh.shard_count, sh.shard,
       sh.last_processed_transaction_id::text::bigint, sh.last_processed_position
FROM outbox.subscription_shards AS sh
JOIN outbox.subscriptions AS s ON s.subscription_id = sh.subscription_id
WHERE (%(subscription)s::text IS NULL OR s.subscription_id = %(subscription)s)
ORDER BY 1, 3, 4

-- subscription_runtime --
-- What the live leaders of a subscription last wrote of their state machines, summed over its shards: consumers, messages in a handler now, backing off before their next attempt, read and waiting.
SELECT v.consumers, v.in_flight, v.retry_queue, v.buffered
FROM outbox.subscription_status AS v
WHERE v.subscription_id = %(subscription)s

-- parked_set --
-- The parked messages of a subscription a replay or a purge would act on (every one, or the one at a position): how many, the last in delivery order, and a digest of their positions, which a confirmation shows and the action then checks (positions are unique, so one digest is one set of messages; md5 guards against a change, not against the operator).
SELECT count(*),
       md5(coalesce(string_agg(p.position::text, ',' ORDER BY p.position), '')),
       (array_agg(p.transaction_id::text::bigint ORDER BY p.transaction_id DESC, p.position DESC))[1],
       (array_agg(p.position ORDER BY p.transaction_id DESC, p.position DESC))[1]
FROM outbox.parked_messages AS p
WHERE p.subscription_id = %(subscription)s
  AND (%(position)s::bigint IS NULL OR p.position = %(position)s)

-- purge_parked_as_shown --
-- Drops the parked messages a confirmation showed, and only while they are exactly those: the rows up to its last place in delivery order (every one, or the one at a position), locked, must give its digest, or nothing is dropped. One statement, so one snapshot: a message parked meanwhile is neither counted nor dropped. Returns the positions dropped.
WITH {{parked_as_shown}}
DELETE FROM outbox.parked_messages AS p
USING shown
WHERE p.subscription_id = %(subscription)s AND p.position = shown.position
  AND EXISTS (SELECT FROM unchanged)
RETURNING p.position

-- mark_parked_as_shown_for_replay --
-- Asks for a replay of the parked messages a confirmation showed, and only while they are exactly those (as purge_parked_as_shown checks); returns each message's place and the shard whose leader replays it (under the current count).
WITH {{parked_as_shown}}
UPDATE outbox.parked_messages AS p
SET replay_requested_at = clock_timestamp()
FROM shown, outbox.messages AS m, outbox.subscriptions AS s
WHERE p.subscription_id = %(subscription)s AND p.position = shown.position
  AND EXISTS (SELECT FROM unchanged)
  AND m.position = p.position AND s.subscription_id = p.subscription_id
RETURNING p.transaction_id::text::bigint, p.position,
          outbox.message_shard(m.partition_key, m.position, s.shard_count), s.shard_count

-- count_parked --
-- How many parked messages a subscription has.
SELECT count(*) FROM outbox.parked_messages WHERE subscription_id = %(subscription)s

-- publications --
-- Every publication: those with messages, one index probe each (a loose scan of the delivery-order index), and those a subscription names.
WITH RECURSIVE found AS (
    (SELECT m.publication_id FROM outbox.messages AS m ORDER BY m.publication_id LIMIT 1)
    UNION ALL
    SELECT (SELECT m.publication_id FROM outbox.messages AS m
            WHERE m.publication_id > found.publication_id
            ORDER BY m.publication_id LIMIT 1)
    FROM found
    WHERE found.publication_id IS NOT NULL
)
SELECT publication_id FROM found WHERE publication_id IS NOT NULL
UNION
SELECT publication_id FROM outbox.subscriptions
ORDER BY 1

-- subscribed_publications --
-- The publications subscriptions name (for a role that may not read messages).
SELECT DISTINCT publication_id FROM outbox.subscriptions ORDER BY 1

-- latest_messages --
-- A publication's newest messages safe to read (below the safe frontier: what a tail shows), newest first, their payload and headers cut to what a page shows (with their whole lengths): a page that shows 200 characters must not fetch megabytes.
SELECT {{message_excerpt_columns}}
FROM outbox.messages AS m
CROSS JOIN LATERAL (SELECT m.data::text AS data, m.headers::text AS headers OFFSET 0) AS whole
WHERE m.publication_id = %(publication)s
  AND m.transaction_id < pg_snapshot_xmin(pg_current_snapshot())
ORDER BY m.transaction_id DESC, m.position DESC
LIMIT %(limit)s

-- parked_message_excerpt --
-- One parked message of a subscription, its payload and headers cut as latest_messages cuts them, then its parked row's attempts, last error and parked time.
SELECT {{message_excerpt_columns}}, p.attempts, p.last_error, p.parked_at
FROM outbox.parked_messages AS p
JOIN outbox.messages AS m ON m.position = p.position
CROSS JOIN LATERAL (SELECT m.data::text AS data, m.headers::text AS headers OFFSET 0) AS whole
WHERE p.subscription_id = %(subscription)s AND p.position = %(position)s
