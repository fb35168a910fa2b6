-- The Spark source's queries (outbox_spark/), by name, in the format of queries.sql.
-- Two kinds of placeholder: %(name)s blocks run with bound parameters on the driver; {name}
-- blocks are read through COPY, which takes no parameters, so outbox_spark/copy_reader.py fills
-- them with psycopg.sql.Literal values. Every transaction_id goes in as text and is cast
-- (there is no cast from an integer to xid8); the driver-side queries return it as
-- text::bigint, the slice reads as the stored xid8 (outbox_spark/wire_batches.py decodes it).

-- spark_last_safe_row --
-- Whether the read server passed its proof (read_server_proven; nothing is read when it failed), and the last row of a publication after a start and below the safe frontier (nulls when none): a batch end when no row limit applies, and the target of Trigger.AvailableNow.
SELECT proof.proven, last.transaction_id::text::bigint AS transaction_id, last.position
FROM (SELECT {{read_server_proven}} AS proven) AS proof
LEFT JOIN LATERAL (
    SELECT m.transaction_id, m.position
    FROM outbox.messages AS m
    WHERE proof.proven
      AND m.publication_id = %(publication)s
      AND (m.transaction_id, m.position) > (%(after_transaction_id)s::text::xid8, %(after_position)s::bigint)
      AND m.transaction_id < pg_snapshot_xmin(pg_current_snapshot())
    ORDER BY m.transaction_id DESC, m.position DESC
    LIMIT 1
) AS last ON true

-- spark_batch_end --
-- Whether the read server passed its proof (read_server_proven; nothing is read when it failed), and the %(limit)s-th safe row after a start, or the last safe row if fewer are ready (nulls when none); one statement, one snapshot, so the batch is final and holds at most %(limit)s rows.
SELECT proof.proven, candidate.transaction_id::text::bigint AS transaction_id, candidate.position
FROM (SELECT {{read_server_proven}} AS proven) AS proof
LEFT JOIN LATERAL (
    SELECT c.transaction_id, c.position
    FROM (
        (SELECT m.transaction_id, m.position, 1 AS preference
         FROM outbox.messages AS m
         WHERE proof.proven
           AND m.publication_id = %(publication)s
           AND (m.transaction_id, m.position) > (%(after_transaction_id)s::text::xid8, %(after_position)s::bigint)
           AND m.transaction_id < pg_snapshot_xmin(pg_current_snapshot())
         ORDER BY m.transaction_id, m.position
         OFFSET %(limit)s - 1
         LIMIT 1)
        UNION ALL
        (SELECT m.transaction_id, m.position, 2 AS preference
         FROM outbox.messages AS m
         WHERE proof.proven
           AND m.publication_id = %(publication)s
           AND (m.transaction_id, m.position) > (%(after_transaction_id)s::text::xid8, %(after_position)s::bigint)
           AND m.transaction_id < pg_snapshot_xmin(pg_current_snapshot())
         ORDER BY m.transaction_id DESC, m.position DESC
         LIMIT 1)
    ) AS c
    ORDER BY c.preference
    LIMIT 1
) AS candidate ON true

-- spark_split_points --
-- Up to %(slices)s - 1 rows that cut (after, until] into slices of about equal row counts, found by a few index probes whatever the batch's size (counting the batch read every row of it: a tenth or more of a trigger). Rows take positions as they are inserted, so a batch's rows lie spread over the positions from its first row's to until's: the k-th cut is the first row of the batch at or past the k-th of %(slices)s - 1 evenly spaced positions there, looked for among the publication's next 64 rows (none there, no cut). Cuts lie strictly inside the range, so any cuts make slices that hold every row of it once; ones that coincide come back once.
WITH first AS (
    SELECT m.position
    FROM outbox.messages AS m
    WHERE m.publication_id = %(publication)s
      AND (m.transaction_id, m.position) > (%(after_transaction_id)s::text::xid8, %(after_position)s::bigint)
      AND (m.transaction_id, m.position) <= (%(until_transaction_id)s::text::xid8, %(until_position)s::bigint)
    ORDER BY m.transaction_id, m.position
    LIMIT 1
)
SELECT DISTINCT cut.transaction_id::text::bigint AS transaction_id, cut.position
FROM first, generate_series(1, %(slices)s - 1) AS s(slice),
LATERAL (
    SELECT near.transaction_id, near.position
    FROM (
        SELECT m.transaction_id, m.position
        FROM outbox.messages AS m
        WHERE m.publication_id = %(publication)s
          AND m.position >= first.position
              + floor((%(until_position)s::bigint - first.position)::numeric * s.slice / %(slices)s)::bigint
        ORDER BY m.position
        LIMIT 64
    ) AS near
    WHERE (near.transaction_id, near.position) > (%(after_transaction_id)s::text::xid8, %(after_position)s::bigint)
      AND (near.transaction_id, near.position) < (%(until_transaction_id)s::text::xid8, %(until_position)s::bigint)
    ORDER BY near.position
    LIMIT 1
) AS cut
-- Both output columns are bigint here, so this sorts numerically.
ORDER BY transaction_id, position

-- spark_read_slice --
-- Every row of (after, until]; until was chosen below the safe frontier, so no row can still appear in the range. No ORDER BY: Spark needs none within a task, and the planner may then scan without sorting.
SELECT {{source_read_columns}}
FROM outbox.messages AS m
WHERE m.publication_id = {publication}
  AND (m.transaction_id, m.position) > ({after_transaction_id}::text::xid8, {after_position}::bigint)
  AND (m.transaction_id, m.position) <= ({until_transaction_id}::text::xid8, {until_position}::bigint)

-- spark_read_key_bucket --
-- The rows of (after, until] whose partition key hashes to one bucket (keyless rows spread by position), in delivery order, which partitionBy=key promises per key.
SELECT {{source_read_columns}}
FROM outbox.messages AS m
WHERE m.publication_id = {publication}
  AND (m.transaction_id, m.position) > ({after_transaction_id}::text::xid8, {after_position}::bigint)
  AND (m.transaction_id, m.position) <= ({until_transaction_id}::text::xid8, {until_position}::bigint)
  AND CASE WHEN m.partition_key IS NULL THEN m.position % {buckets}
           ELSE abs(hashtextextended(m.partition_key, 0) % {buckets}) END = {bucket}
ORDER BY m.transaction_id, m.position

-- spark_start_subscription --
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

-- spark_record_progress --
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

-- spark_subscription_owner --
-- Who a subscription id belongs to, to explain a refused start or commit.
SELECT publication_id, settings ->> 'kind' AS kind
FROM outbox.subscriptions
WHERE subscription_id = %(subscription)s

-- spark_retired_up_to --
-- A publication's retired-up-to mark (the last message retention dropped, in delivery order), checked by a batch read, which holds no subscription row back: before planning, and by each slice after its COPY.
SELECT transaction_id::text::bigint AS transaction_id, position FROM outbox.retired_positions
WHERE publication_id = {publication}

-- spark_replayed_past --
-- Whether this server has every row of a slice: a hot standby once its safe frontier is past the slice's end, a server not in recovery at once (a batch end is chosen below the frontier of the primary or of one of its standbys, never past the primary's; a promoted copy fails the proof instead), then where the server stands (server_state_columns), in the same statement: a standby that passes outbox.read_servers.refusal here had replayed the slice as the primary committed it.
SELECT NOT pg_is_in_recovery()
       OR pg_snapshot_xmin(pg_current_snapshot()) > {until_transaction_id}::text::xid8,
       {{server_state_columns}}

-- spark_range_rows --
-- How many messages of a publication lie in (after, until]: the archive job cuts a range into files of a given size from it.
SELECT count(*)
FROM outbox.messages AS m
WHERE m.publication_id = %(publication)s
  AND (m.transaction_id, m.position) > (%(after_transaction_id)s::text::xid8, %(after_position)s::bigint)
  AND (m.transaction_id, m.position) <= (%(until_transaction_id)s::text::xid8, %(until_position)s::bigint)
