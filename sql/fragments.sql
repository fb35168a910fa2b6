-- Parts several statements share, by name, in the format of queries.sql; a statement includes
-- one as {{name}} (outbox/queries.py substitutes it when the files are loaded).

-- message_columns --
-- A message's columns in the order poller.store.message_reads.message_from_row and the Spark source's Arrow schema read them; the transaction id as bigint (psycopg returns xid8 as text, which sorts wrongly).
m.position,
m.transaction_id::text::bigint AS transaction_id,
m.publication_id AS publication, m.message_id, m.message_type, m.partition_key,
m.data::text AS data, m.headers::text AS headers, m.appended_at

-- message_excerpt_columns --
-- A message's columns as a page shows them (poller.store.operator_store.excerpt_from_row): the payload and headers as JSON text cut to %(shown)s characters, each followed by its whole length; the statement names the uncut texts `whole.data` and `whole.headers` (a lateral subquery kept apart by OFFSET 0, so each is made once).
m.position, m.transaction_id::text::bigint AS transaction_id,
m.publication_id AS publication, m.message_id, m.message_type, m.partition_key,
left(whole.data, %(shown)s), length(whole.data),
left(whole.headers, %(shown)s), length(whole.headers), m.appended_at

-- source_read_columns --
-- The columns the Spark source's slice reads send, in the order of outbox_spark.wire_batches.WIRE_SCHEMA: xid8 and jsonb as stored, because a text cast per row costs the server more than anything else in the read (the reader decodes them in Arrow), and no publication, which every row of a read shares (the reader fills it in).
m.position, m.transaction_id, m.message_id, m.message_type, m.partition_key,
m.data, m.headers, m.appended_at

-- layout_read_bound --
-- How far the shards of one count (%(shard_count)s) of a subscription (%(subscription)s) may read and move their checkpoints, as the subscription's row stands in the statement's own snapshot: to the barrier while that count drains, without end while it is the current count, nowhere once it is neither (a change ended without it). One row of two columns, compared as `(transaction_id, position) <= ({{layout_read_bound}})`; none when the subscription is gone, which compares as null: nothing. A term learns of a change only at its next renewal; the statement learns of it at once.
SELECT CASE WHEN s.draining_shard_count = %(shard_count)s THEN s.shard_barrier_transaction_id
            WHEN s.shard_count = %(shard_count)s THEN '9223372036854775807'::xid8
            ELSE '0'::xid8 END,
       CASE WHEN s.draining_shard_count = %(shard_count)s THEN s.shard_barrier_position
            WHEN s.shard_count = %(shard_count)s THEN 9223372036854775807
            ELSE 0 END
FROM outbox.subscriptions AS s
WHERE s.subscription_id = %(subscription)s

-- server_state_columns --
-- Where the server running the statement stands, in the order of outbox.read_servers.ServerState: its cluster's system identifier, its postmaster's start, whether it is a standby, its WAL position in bytes (a primary's current one, a standby's last replayed), when the last transaction it replayed committed (null on a primary), its clock, and its safe frontier.
(SELECT c.system_identifier FROM pg_control_system() AS c),
pg_postmaster_start_time(),
pg_is_in_recovery(),
pg_wal_lsn_diff(CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn()
                     ELSE pg_current_wal_lsn() END, '0/0')::bigint,
pg_last_xact_replay_timestamp(),
clock_timestamp(),
pg_snapshot_xmin(pg_current_snapshot())::text::bigint

-- read_server_proven --
-- Whether the server running the statement may serve the snapshot-safe read for the primary of %(primary_system_identifier)s and %(primary_started_at)s (outbox.read_servers.ReadProof; both null when the reads go to the database itself): a standby of that cluster still in recovery, or that primary (outbox.read_servers.refusal's rule). A scalar subquery, so an InitPlan evaluated once, during execution: after the statement's snapshot was taken, and recovery never resumes once it ended, so true proves the snapshot was a standby's. A statement gates its scans on it (a One-Time Filter: nothing is read when it fails). pg_control_system() reads the control file (about 5 us); a function call rather than a subquery, which cost ~25 us more to plan per read.
(SELECT %(primary_started_at)s::timestamptz IS NULL
        OR (pg_control_system()).system_identifier = %(primary_system_identifier)s::bigint
           AND (pg_is_in_recovery()
                OR pg_postmaster_start_time() = %(primary_started_at)s::timestamptz))

-- parked_as_shown --
-- The parked messages a confirmation showed, as two CTEs for an operator's action on them: `shown`, the rows up to its last place in delivery order (every one, or the one at %(position)s), locked; `unchanged`, one row only while their positions still give its digest. The action joins `shown` and acts only if `unchanged` has its row.
shown AS (
    SELECT p.position FROM outbox.parked_messages AS p
    WHERE p.subscription_id = %(subscription)s
      AND (%(position)s::bigint IS NULL OR p.position = %(position)s)
      AND (p.transaction_id, p.position)
          <= (%(up_to_transaction_id)s::text::xid8, %(up_to_position)s::bigint)
    FOR UPDATE
),
unchanged AS (
    SELECT FROM shown
    HAVING md5(coalesce(string_agg(shown.position::text, ',' ORDER BY shown.position), ''))
           = %(digest)s
)
