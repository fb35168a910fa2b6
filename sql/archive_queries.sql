-- A publication's archive (outbox/archive/catalog.py): its row in outbox.archives, its ranges,
-- the job's lock, and the figures status and metrics show. Same format as queries.sql. Every
-- transaction id goes in as text (there is no cast from an integer to xid8) and comes back as
-- text::bigint.

-- archive_of_publication --
-- A publication's archive: where, in which format version, where it begins and how far it has archived.
SELECT publication_id, uri, format_version,
       begins_after_transaction_id::text::bigint, begins_after_position,
       archived_transaction_id::text::bigint, archived_position, archived_at
FROM outbox.archives
WHERE publication_id = %(publication)s

-- list_archives --
-- Every archive, by publication.
SELECT publication_id, uri, format_version,
       begins_after_transaction_id::text::bigint, begins_after_position,
       archived_transaction_id::text::bigint, archived_position, archived_at
FROM outbox.archives
ORDER BY publication_id

-- begin_archive --
-- Records that a publication is archived to %(uri)s from now on, beginning after its retired-up-to mark (what retention dropped before is in no archive); nothing if it already is. Run after lock_messages_against_retirement in the same transaction, so no drop lands between reading the mark and the row that holds retention from then on.
INSERT INTO outbox.archives
    (publication_id, uri, format_version, begins_after_transaction_id, begins_after_position,
     archived_transaction_id, archived_position)
SELECT %(publication)s, %(uri)s, %(format_version)s,
       coalesce(r.transaction_id, '0'::xid8), coalesce(r.position, 0),
       coalesce(r.transaction_id, '0'::xid8), coalesce(r.position, 0)
FROM (SELECT 1) AS one
LEFT JOIN outbox.retired_positions AS r ON r.publication_id = %(publication)s
ON CONFLICT (publication_id) DO NOTHING

-- archived_ranges_after --
-- The ranges of a publication's archive holding messages after a position, in delivery order, at most %(limit)s.
SELECT after_transaction_id::text::bigint, after_position,
       first_transaction_id::text::bigint, first_position,
       last_transaction_id::text::bigint, last_position,
       uri, format_version, rows, bytes, checksum, files
FROM outbox.archived_ranges
WHERE publication_id = %(publication)s
  AND (last_transaction_id, last_position)
      > (%(after_transaction_id)s::text::xid8, %(after_position)s::bigint)
ORDER BY last_transaction_id, last_position
LIMIT %(limit)s

-- archived_ranges_in_table --
-- The ranges of every archive whose messages retention has not dropped all of (they end after the publication's retired-up-to mark): retention checks their files are there before it drops any of them.
SELECT g.publication_id, g.after_transaction_id::text::bigint, g.after_position,
       g.first_transaction_id::text::bigint, g.first_position,
       g.last_transaction_id::text::bigint, g.last_position,
       g.uri, g.format_version, g.rows, g.bytes, g.checksum, g.files
FROM outbox.archived_ranges AS g
LEFT JOIN outbox.retired_positions AS r ON r.publication_id = g.publication_id
WHERE r.publication_id IS NULL
   OR (g.last_transaction_id, g.last_position) > (r.transaction_id, r.position)
ORDER BY g.publication_id, g.last_transaction_id, g.last_position

-- archive_commit_range --
-- Makes a range part of the archive: moves the archive's mark from the range's start to its last message and records the range with its files, in one statement. Nothing is written (no row returned) unless the mark is at the range's start and the archive is still at %(uri)s in %(format_version)s, so a range is recorded once, contiguous with the one before.
WITH moved AS (
    UPDATE outbox.archives AS a
    SET archived_transaction_id = %(last_transaction_id)s::text::xid8,
        archived_position = %(last_position)s,
        archived_at = clock_timestamp()
    WHERE a.publication_id = %(publication)s
      AND (a.archived_transaction_id, a.archived_position)
          = (%(after_transaction_id)s::text::xid8, %(after_position)s::bigint)
      AND a.uri = %(uri)s AND a.format_version = %(format_version)s
    RETURNING a.publication_id
)
INSERT INTO outbox.archived_ranges
    (publication_id, after_transaction_id, after_position, first_transaction_id, first_position,
     last_transaction_id, last_position, uri, format_version, rows, bytes, checksum, files)
SELECT moved.publication_id, %(after_transaction_id)s::text::xid8, %(after_position)s,
       %(first_transaction_id)s::text::xid8, %(first_position)s,
       %(last_transaction_id)s::text::xid8, %(last_position)s,
       %(uri)s, %(format_version)s, %(rows)s, %(bytes)s, %(checksum)s, %(files)s
FROM moved
RETURNING publication_id

-- try_archive_lock --
-- The session lock that lets one archive job write a publication's archive at a time; false if another session holds it.
SELECT pg_try_advisory_lock(hashtextextended('outbox.archive:' || %(publication)s, 0))

-- release_archive_lock --
-- Gives a publication's archive lock back.
SELECT pg_advisory_unlock(hashtextextended('outbox.archive:' || %(publication)s, 0))

-- archive_lock_holder --
-- The session holding a publication's archive lock (another archive job), to name it in a refusal; no row if none (it ended meanwhile) or its session is hidden from this role.
SELECT a.pid, a.application_name, a.client_addr::text, a.backend_start
FROM pg_locks AS l
JOIN pg_stat_activity AS a ON a.pid = l.pid
WHERE l.locktype = 'advisory' AND l.objsubid = 1 AND l.granted
  AND ((l.classid::bigint << 32) | l.objid::bigint)
      = hashtextextended('outbox.archive:' || %(publication)s, 0)
LIMIT 1

-- delete_archive --
-- Forgets a publication's archive and its ranges (retention stops waiting for it); returns where its files are.
DELETE FROM outbox.archives WHERE publication_id = %(publication)s RETURNING uri

-- archive_lag --
-- Per archive, the publication's messages not archived yet (after the archive's mark) and how old the oldest of them is, in seconds (0 when none): through outbox.archive_lag(), which every role may call.
SELECT l.publication_id, l.messages,
       coalesce(extract(epoch FROM clock_timestamp() - l.oldest_appended_at), 0)::float8
FROM outbox.archive_lag() AS l
ORDER BY l.publication_id
