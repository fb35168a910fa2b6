-- Every query the product runs, by name. A block starts with `-- name --`, then one comment
-- line saying what it does, then the statement. Loaded once by outbox/queries.py.

-- append_message --
-- Appends one message; returns its position, or the existing position for a repeated message_id.
WITH inserted AS (
    INSERT INTO outbox.messages
        (publication_id, message_id, message_type, partition_key, data, headers)
    VALUES
        (%(publication)s, %(message_id)s, %(message_type)s, %(partition_key)s,
         %(data)s::jsonb, %(headers)s::jsonb)
    ON CONFLICT (publication_id, message_id) DO NOTHING
    RETURNING position
)
SELECT position FROM inserted
UNION ALL
SELECT position FROM outbox.messages
WHERE publication_id = %(publication)s AND message_id = %(message_id)s
  AND NOT EXISTS (SELECT FROM inserted)

-- append_messages --
-- Appends a batch in one statement; returns (ordinal, position) for every input row, existing positions for repeated ids.
WITH input AS (
    SELECT *
    FROM unnest(%(message_ids)s::text[], %(message_types)s::text[], %(partition_keys)s::text[],
                %(datas)s::text[], %(headers)s::text[])
         WITH ORDINALITY AS t(message_id, message_type, partition_key, data, headers, ordinal)
),
inserted AS (
    INSERT INTO outbox.messages
        (publication_id, message_id, message_type, partition_key, data, headers)
    SELECT %(publication)s, message_id, message_type, partition_key, data::jsonb, headers::jsonb
    FROM input
    ORDER BY ordinal
    ON CONFLICT (publication_id, message_id) DO NOTHING
    RETURNING message_id, position
)
SELECT input.ordinal, coalesce(inserted.position, existing.position) AS position
FROM input
LEFT JOIN inserted ON inserted.message_id = input.message_id
LEFT JOIN outbox.messages AS existing
       ON existing.publication_id = %(publication)s AND existing.message_id = input.message_id
ORDER BY input.ordinal

-- positions_of_message_ids --
-- Looks up positions of already-committed message ids (after a concurrent duplicate committed mid-statement).
SELECT message_id, position FROM outbox.messages
WHERE publication_id = %(publication)s AND message_id = ANY(%(message_ids)s::text[])

-- notify_publication --
-- Wakes listening pollers at commit; opt-in, because NOTIFY serialises committing writers.
SELECT pg_notify('outbox', %(publication)s)

-- read_batch --
-- The snapshot-safe read: only rows below the oldest transaction still running, in (transaction_id, position) order after a checkpoint.
SELECT m.position,
       m.transaction_id::text::bigint AS transaction_id,
       m.publication_id, m.message_id, m.message_type, m.partition_key,
       m.data::text AS data, m.headers::text AS headers, m.scheduled
FROM outbox.messages AS m
WHERE m.publication_id = %(publication)s
  AND (m.transaction_id, m.position) > (%(after_transaction_id)s::text::xid8, %(after_position)s::bigint)
  AND m.transaction_id < pg_snapshot_xmin(pg_current_snapshot())
ORDER BY m.transaction_id, m.position
LIMIT %(limit)s

-- read_batch_naive --
-- The read every home-made poller starts with; kept only to show what it loses (demo and tests).
SELECT m.position,
       m.transaction_id::text::bigint AS transaction_id,
       m.publication_id, m.message_id, m.message_type, m.partition_key,
       m.data::text AS data, m.headers::text AS headers, m.scheduled
FROM outbox.messages AS m
WHERE m.publication_id = %(publication)s AND m.position > %(after_position)s::bigint
ORDER BY m.position
LIMIT %(limit)s

-- safe_frontier --
-- The oldest transaction id still running anywhere in the cluster: nothing at or above it is safe to read yet.
SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint AS frontier
