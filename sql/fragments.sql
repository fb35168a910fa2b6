-- Parts several statements share, by name, in the format of queries.sql; a statement includes
-- one as {{name}} (outbox/queries.py substitutes it when the files are loaded).

-- message_columns --
-- A message's columns in the order poller.store.message_reads.message_from_row and the Spark source's Arrow schema read them; the transaction id as bigint (psycopg returns xid8 as text, which sorts wrongly).
m.position,
m.transaction_id::text::bigint AS transaction_id,
m.publication_id AS publication, m.message_id, m.message_type, m.partition_key,
m.data::text AS data, m.headers::text AS headers, m.appended_at
