-- The demo's queries (outbox_cli/demo/), by name, in the format of queries.sql. Not part of
-- the product: they exist to show what the product avoids.

-- read_batch_naive --
-- The read every home-made poller starts with; kept only to show what it loses (demo and tests).
SELECT {{message_columns}}
FROM outbox.messages AS m
WHERE m.publication_id = %(publication)s AND m.position > %(after_position)s::bigint
ORDER BY m.position
LIMIT %(limit)s
