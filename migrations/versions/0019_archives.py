"""The outbox's history in the lake: a publication's messages archived to Parquet
(`outbox spark archive`), and retention that waits for the archive.

- `outbox.archives`: one row per archived publication: where its archive is (`uri`), the
  format version its files are written in, where it begins (the publication's retired-up-to
  mark when archiving began: what was retired before is not in it) and the archived-up-to mark,
  the last message of its last range in delivery order.
- `outbox.archived_ranges`: the ranges `(after, last]` in delivery order, contiguous from the
  archive's beginning, each with its files (path, rows, bytes and SHA-256 each). A range is
  visible exactly when its row commits, in the statement that moves the mark: files no row
  lists are not part of the archive.
- `outbox.message_partition_holder` names a new holder, `archive`: a partition with a message
  of an archived publication after the archive's mark is kept, as a subscription's checkpoint
  keeps it, so retention never drops a message the archive does not hold.

Revision ID: 0019
Revises: 0018
"""

from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None

ARCHIVES = """
-- A publication whose history is archived to Parquet by `outbox spark archive` (0019): where
-- (uri), in which format version, where the archive begins (the publication's retired-up-to
-- mark when archiving began, 0:0 if nothing had been retired: what was retired before is in no
-- archive) and the archived-up-to mark (the last message of its last range, in delivery order;
-- the beginning while it has none). Retention keeps every message of the publication after
-- the mark (outbox.message_partition_holder, kind 'archive').
CREATE TABLE outbox.archives (
    publication_id text PRIMARY KEY,
    uri text NOT NULL,
    format_version integer NOT NULL,
    begins_after_transaction_id xid8 NOT NULL,
    begins_after_position bigint NOT NULL,
    archived_transaction_id xid8 NOT NULL,
    archived_position bigint NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    archived_at timestamptz NULL,
    CONSTRAINT archives_uri_valid CHECK (uri <> ''),
    CONSTRAINT archives_format_version_valid CHECK (format_version >= 1),
    CONSTRAINT archives_mark_valid
        CHECK ((archived_transaction_id, archived_position)
               >= (begins_after_transaction_id, begins_after_position))
);

-- The archive's ranges, (after, last] in delivery order, each starting where the one before it
-- ends (the first at the archive's beginning). A range is part of the archive exactly when its
-- row is committed, by the statement that moves the archive's mark from `after` to `last`
-- (archive_commit_range): files that no row lists (a job killed while writing) are not.
-- files: [{"path", "slice", "rows", "bytes", "sha256", "first", "last"}], paths relative to
-- uri; checksum: the SHA-256 of the files' SHA-256 digests in that order.
CREATE TABLE outbox.archived_ranges (
    publication_id text NOT NULL
        REFERENCES outbox.archives (publication_id) ON DELETE CASCADE,
    after_transaction_id xid8 NOT NULL,
    after_position bigint NOT NULL,
    first_transaction_id xid8 NOT NULL,
    first_position bigint NOT NULL,
    last_transaction_id xid8 NOT NULL,
    last_position bigint NOT NULL,
    uri text NOT NULL,
    format_version integer NOT NULL,
    rows bigint NOT NULL,
    bytes bigint NOT NULL,
    checksum text NOT NULL,
    files jsonb NOT NULL,
    archived_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (publication_id, last_transaction_id, last_position),
    CONSTRAINT archived_ranges_bounds_valid
        CHECK ((after_transaction_id, after_position) < (first_transaction_id, first_position)
               AND (first_transaction_id, first_position)
                   <= (last_transaction_id, last_position)),
    CONSTRAINT archived_ranges_counts_valid CHECK (rows > 0 AND bytes > 0),
    CONSTRAINT archived_ranges_files_valid
        CHECK (jsonb_typeof(files) = 'array' AND jsonb_array_length(files) > 0)
);

-- Per archive: the publication's messages not archived yet (after the archive's mark) and when
-- the oldest of them was appended. As the schema's owner, as outbox.retention_status' functions
-- run, so `outbox status` and the metrics report it for a role that may not read messages.
CREATE FUNCTION outbox.archive_lag()
RETURNS TABLE (publication_id text, messages bigint, oldest_appended_at timestamptz)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    SELECT a.publication_id, behind.messages, behind.oldest
    FROM outbox.archives AS a
    CROSS JOIN LATERAL (
        SELECT count(*) AS messages, min(m.appended_at) AS oldest
        FROM outbox.messages AS m
        WHERE m.publication_id = a.publication_id
          AND (m.transaction_id, m.position)
              > (a.archived_transaction_id, a.archived_position)
    ) AS behind
    ORDER BY a.publication_id
$$;

-- Catch-up subscriptions and the daemon (the poller role) read archived history; `outbox
-- status` (the reader role) shows the archive's progress.
DO $grant$
DECLARE
    prefix text := coalesce(nullif(current_setting('outbox.role_prefix', true), ''), 'outbox');
BEGIN
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = prefix || '_poller') THEN
        EXECUTE format('GRANT SELECT ON outbox.archives, outbox.archived_ranges TO %I',
                       prefix || '_poller');
    END IF;
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = prefix || '_reader') THEN
        EXECUTE format('GRANT SELECT ON outbox.archives, outbox.archived_ranges TO %I',
                       prefix || '_reader');
    END IF;
END
$grant$;
"""

HOLDER = """
-- What keeps the partition taking [first_position, end_position) from being retired, the
-- first reason found (no row: nothing): 'unfilled' (positions still to be handed out),
-- 'subscription' or 'spark' (a subscription whose checkpoint, or one of whose shards'
-- checkpoints, has not passed one of its messages there), 'consumer' (an
-- outbox.consumer_positions row behind one of them), 'archive' (0019: a message of an archived
-- publication there after the archive's mark; holder: the publication), 'parked' (a parked
-- message there), 'minimum age' (a message appended less than minimum_age ago; not checked
-- when minimum_age is null). held_since: when the oldest message held was appended (the
-- parking time for 'parked', the newest message's for 'minimum age').
CREATE OR REPLACE FUNCTION outbox.message_partition_holder(
    first_position bigint, end_position bigint, minimum_age interval)
RETURNS TABLE (kind text, holder text, held_since timestamptz)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    newest timestamptz;
BEGIN
    IF end_position > outbox.next_message_position() THEN
        RETURN QUERY SELECT 'unfilled'::text, NULL::text, NULL::timestamptz;
        RETURN;
    END IF;
    RETURN QUERY
    SELECT CASE WHEN s.settings ->> 'kind' = 'spark' THEN 'spark' ELSE 'subscription' END,
           s.subscription_id, first_held.appended_at
    FROM outbox.subscriptions AS s,
         -- A sharded subscription's own checkpoint is its floor, which its shards' leaders
         -- raise after their own writes: held at the lowest shard checkpoint itself too, so a
         -- floor written late or wrong never lets a partition go before every shard passed it.
         LATERAL (SELECT c.transaction_id, c.position
                  FROM (SELECT s.last_processed_transaction_id, s.last_processed_position
                        UNION ALL
                        SELECT sh.last_processed_transaction_id, sh.last_processed_position
                        FROM outbox.subscription_shards AS sh
                        WHERE sh.subscription_id = s.subscription_id)
                       AS c (transaction_id, position)
                  ORDER BY c.transaction_id, c.position LIMIT 1) AS held_at,
         LATERAL (SELECT m.appended_at FROM outbox.messages AS m
                  WHERE m.publication_id = s.publication_id
                    AND (m.transaction_id, m.position) > (held_at.transaction_id, held_at.position)
                    AND m.position >= first_position AND m.position < end_position
                  ORDER BY m.transaction_id, m.position LIMIT 1) AS first_held
    ORDER BY first_held.appended_at, s.subscription_id
    LIMIT 1;
    IF FOUND THEN
        RETURN;
    END IF;
    -- Added by a later migration, if at all: read through its row as JSON, so that neither
    -- its absence nor its exact columns break retention.
    IF to_regclass('outbox.consumer_positions') IS NOT NULL THEN
        RETURN QUERY EXECUTE
        'SELECT ''consumer''::text, coalesce(c.row ->> ''consumer_name'', c.row ->> ''consumer'',
                                             c.row::text), first_held.appended_at
         FROM (SELECT to_jsonb(p) AS row, p.transaction_id, p.position
               FROM outbox.consumer_positions AS p) AS c,
              LATERAL (SELECT m.appended_at FROM outbox.messages AS m
                       WHERE (m.transaction_id, m.position) > (c.transaction_id, c.position)
                         AND (c.row ->> ''publication_id'' IS NULL
                              OR m.publication_id = c.row ->> ''publication_id'')
                         AND m.position >= $1 AND m.position < $2
                       ORDER BY m.transaction_id, m.position LIMIT 1) AS first_held
         ORDER BY first_held.appended_at LIMIT 1'
        USING first_position, end_position;
        IF FOUND THEN
            RETURN;
        END IF;
    END IF;
{archive}    RETURN QUERY
    SELECT 'parked'::text, p.subscription_id, p.parked_at
    FROM outbox.parked_messages AS p
    WHERE p.position >= first_position AND p.position < end_position
    ORDER BY p.parked_at LIMIT 1;
    IF FOUND OR minimum_age IS NULL THEN
        RETURN;
    END IF;
    -- appended_at is the writer transaction's start, so the newest position need not be the
    -- newest message: its time is only a cheap first test, the scan decides.
    SELECT m.appended_at INTO newest FROM outbox.messages AS m
    WHERE m.position >= first_position AND m.position < end_position
    ORDER BY m.position DESC LIMIT 1;
    IF newest > clock_timestamp() - minimum_age THEN
        RETURN QUERY SELECT 'minimum age'::text, NULL::text, newest;
        RETURN;
    END IF;
    SELECT max(m.appended_at) INTO newest FROM outbox.messages AS m
    WHERE m.position >= first_position AND m.position < end_position;
    IF newest > clock_timestamp() - minimum_age THEN
        RETURN QUERY SELECT 'minimum age'::text, NULL::text, newest;
    END IF;
END
$$;
"""

ARCHIVE_HOLDS = """\
    -- An archived publication's messages after the archive's mark are not in the archive yet:
    -- dropping them would lose them (0019).
    RETURN QUERY
    SELECT 'archive'::text, a.publication_id, first_held.appended_at
    FROM outbox.archives AS a,
         LATERAL (SELECT m.appended_at FROM outbox.messages AS m
                  WHERE m.publication_id = a.publication_id
                    AND (m.transaction_id, m.position)
                        > (a.archived_transaction_id, a.archived_position)
                    AND m.position >= first_position AND m.position < end_position
                  ORDER BY m.transaction_id, m.position LIMIT 1) AS first_held
    ORDER BY first_held.appended_at, a.publication_id
    LIMIT 1;
    IF FOUND THEN
        RETURN;
    END IF;
"""


def upgrade() -> None:
    op.execute(ARCHIVES)
    op.execute(HOLDER.format(archive=ARCHIVE_HOLDS))


def downgrade() -> None:
    op.execute(HOLDER.format(archive=""))
    op.execute("DROP FUNCTION outbox.archive_lag()")
    op.execute("DROP TABLE outbox.archived_ranges")
    op.execute("DROP TABLE outbox.archives")
