-- The Spark source's queries (pipeline/), by name, in the format of queries.sql.
-- Two kinds of placeholder: %(name)s blocks run with bound parameters on the driver; {name}
-- blocks are read through COPY, which takes no parameters, so pipeline/copy_reader.py fills
-- them with psycopg.sql.Literal values. Every transaction_id goes in as text and is cast
-- (there is no cast from an integer to xid8) and comes out as text::bigint.

-- pipeline_last_safe_row --
-- The last row of a publication after a start and below the safe frontier: a batch end when no row limit applies, and the target of Trigger.AvailableNow.
SELECT m.transaction_id::text::bigint AS transaction_id, m.position
FROM outbox.messages AS m
WHERE m.publication_id = %(publication)s
  AND (m.transaction_id, m.position) > (%(after_transaction_id)s::text::xid8, %(after_position)s::bigint)
  AND m.transaction_id < pg_snapshot_xmin(pg_current_snapshot())
ORDER BY m.transaction_id DESC, m.position DESC
LIMIT 1

-- pipeline_batch_end --
-- The last of at most %(limit)s rows after a start and below the safe frontier, chosen in one statement so the batch is final.
SELECT c.transaction_id::text::bigint AS transaction_id, c.position
FROM (
    SELECT m.transaction_id, m.position
    FROM outbox.messages AS m
    WHERE m.publication_id = %(publication)s
      AND (m.transaction_id, m.position) > (%(after_transaction_id)s::text::xid8, %(after_position)s::bigint)
      AND m.transaction_id < pg_snapshot_xmin(pg_current_snapshot())
    ORDER BY m.transaction_id, m.position
    LIMIT %(limit)s
) AS c
ORDER BY c.transaction_id DESC, c.position DESC
LIMIT 1

-- pipeline_slice_ends --
-- The last row of each of %(slices)s slices of (after, until] holding as many rows as each other (ntile), in delivery order.
SELECT t.transaction_id::text::bigint AS transaction_id, t.position
FROM (
    SELECT n.transaction_id, n.position, n.slice,
           lead(n.slice) OVER (ORDER BY n.transaction_id, n.position) AS next_slice
    FROM (
        SELECT m.transaction_id, m.position,
               ntile(%(slices)s) OVER (ORDER BY m.transaction_id, m.position) AS slice
        FROM outbox.messages AS m
        WHERE m.publication_id = %(publication)s
          AND (m.transaction_id, m.position) > (%(after_transaction_id)s::text::xid8, %(after_position)s::bigint)
          AND (m.transaction_id, m.position) <= (%(until_transaction_id)s::text::xid8, %(until_position)s::bigint)
    ) AS n
) AS t
WHERE t.next_slice IS DISTINCT FROM t.slice
ORDER BY t.transaction_id, t.position

-- pipeline_read_slice --
-- Every row of (after, until] in delivery order; until was chosen below the safe frontier, so no row can still appear in the range.
SELECT m.position,
       m.transaction_id::text::bigint AS transaction_id,
       m.publication_id AS publication, m.message_id, m.message_type, m.partition_key,
       m.data::text AS data, m.headers::text AS headers, m.scheduled
FROM outbox.messages AS m
WHERE m.publication_id = {publication}
  AND (m.transaction_id, m.position) > ({after_transaction_id}::text::xid8, {after_position}::bigint)
  AND (m.transaction_id, m.position) <= ({until_transaction_id}::text::xid8, {until_position}::bigint)
ORDER BY m.transaction_id, m.position

-- pipeline_read_key_bucket --
-- The rows of (after, until] whose partition key hashes to one bucket (keyless rows spread by position), in delivery order.
SELECT m.position,
       m.transaction_id::text::bigint AS transaction_id,
       m.publication_id AS publication, m.message_id, m.message_type, m.partition_key,
       m.data::text AS data, m.headers::text AS headers, m.scheduled
FROM outbox.messages AS m
WHERE m.publication_id = {publication}
  AND (m.transaction_id, m.position) > ({after_transaction_id}::text::xid8, {after_position}::bigint)
  AND (m.transaction_id, m.position) <= ({until_transaction_id}::text::xid8, {until_position}::bigint)
  AND CASE WHEN m.partition_key IS NULL THEN m.position % {buckets}
           ELSE abs(hashtextextended(m.partition_key, 0) % {buckets}) END = {bucket}
ORDER BY m.transaction_id, m.position

-- pipeline_start_subscription --
-- Creates or resets a Spark query's subscription at its starting offset when the query starts without a checkpoint; returns nothing if the id belongs to something else.
INSERT INTO outbox.subscriptions AS s
    (subscription_id, publication_id, last_processed_transaction_id, last_processed_position, settings)
VALUES (%(subscription)s, %(publication)s, %(transaction_id)s::text::xid8, %(position)s, '{"kind": "spark"}')
ON CONFLICT (subscription_id) DO UPDATE
SET last_processed_transaction_id = excluded.last_processed_transaction_id,
    last_processed_position = excluded.last_processed_position,
    updated_at = clock_timestamp()
WHERE s.publication_id = excluded.publication_id AND s.settings ->> 'kind' = 'spark'
RETURNING s.subscription_id

-- pipeline_record_progress --
-- Moves a Spark query's subscription forward to the last row it processed; a repeated or older offset changes nothing.
INSERT INTO outbox.subscriptions AS s
    (subscription_id, publication_id, last_processed_transaction_id, last_processed_position, settings)
VALUES (%(subscription)s, %(publication)s, %(transaction_id)s::text::xid8, %(position)s, '{"kind": "spark"}')
ON CONFLICT (subscription_id) DO UPDATE
SET last_processed_transaction_id = excluded.last_processed_transaction_id,
    last_processed_position = excluded.last_processed_position,
    updated_at = clock_timestamp()
WHERE s.publication_id = excluded.publication_id AND s.settings ->> 'kind' = 'spark'
  AND (s.last_processed_transaction_id, s.last_processed_position)
      < (excluded.last_processed_transaction_id, excluded.last_processed_position)
RETURNING s.subscription_id

-- pipeline_subscription_owner --
-- Who a subscription id belongs to, to explain a refused start or commit.
SELECT publication_id, settings ->> 'kind' AS kind
FROM outbox.subscriptions
WHERE subscription_id = %(subscription)s
