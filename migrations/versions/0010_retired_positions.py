"""Retired-up-to marks: what retention dropped, per publication, so nobody resumes below it.

`outbox.retired_positions` holds, per publication, the last message (in delivery order) of the
partitions retention dropped; `outbox.retire_message_partition` raises it in the transaction of
the drop. A position below it has lost messages: catch-up subscriptions refuse to resume
there, and `subscription create --from` and `seek --to` refuse it. Partitions dropped before
this migration left no mark.

Revision ID: 0010
Revises: 0009
"""

from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

RETIRED_POSITIONS = """
-- Per publication, the last message (in delivery order) of every partition retention has
-- dropped: a reader resuming after a position below it would never see the retired messages
-- after that position, so catch-up subscriptions and the operator's create and seek refuse it
-- (see the retention section of docs/architecture.md). Written only by
-- outbox.retire_message_partition, in the transaction of the drop.
CREATE TABLE outbox.retired_positions (
    publication_id text PRIMARY KEY,
    transaction_id xid8 NOT NULL,
    position bigint NOT NULL,
    retired_at timestamptz NOT NULL DEFAULT now()
);
"""

GRANT_READ = """
-- A catch-up subscription, which may run as the poller role (0007), reads the marks.
DO $grant$
DECLARE
    poller text := coalesce(nullif(current_setting('outbox.role_prefix', true), ''), 'outbox')
                   || '_poller';
BEGIN
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = poller) THEN
        EXECUTE format('GRANT SELECT ON outbox.retired_positions TO %I', poller);
    END IF;
END
$grant$;
"""

RETIRE_WITH_MARKS = """
-- Drops one partition if it may still be retired; returns its message count, or null when
-- something holds it now. Call it in a transaction of its own: the parent's lock is held until
-- commit. Order of locks: first SHARE on the partition, which waits for every transaction that
-- wrote there (a writer could not have committed the rows this check must see) but blocks no
-- one else; then, after the full check, ACCESS EXCLUSIVE on the parent, which DROP needs and
-- which does block writers and readers: only for a re-check of the holders (a seek may have
-- moved a checkpoint back) and the drop. Either wait gives up after lock_wait
-- (lock_not_available), so a long transaction delays retention, never the writers for long.
-- The drop raises each publication's mark in outbox.retired_positions to its last message
-- there, in delivery order, in the same transaction (0010): a statement that reads the mark and
-- the messages together locks the parent before its snapshot, so it sees both or neither.
CREATE FUNCTION outbox.retire_message_partition(
    name text, minimum_age interval, lock_wait interval)
RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    bounds record;
    messages bigint;
    publications text[];
    transaction_ids xid8[];
    last_positions bigint[];
BEGIN
    -- SECURITY DEFINER: the name must be one of this table's partitions, nothing else.
    SELECT * INTO bounds FROM outbox.message_partitions() AS p WHERE p.partition_name = name;
    IF NOT FOUND THEN
        RAISE EXCEPTION '% is not a partition of outbox.messages', name
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    PERFORM set_config('lock_timeout', (extract(epoch FROM lock_wait) * 1000)::bigint || 'ms',
                       true);
    EXECUTE format('LOCK TABLE outbox.%I IN SHARE MODE', name);
    IF EXISTS (SELECT FROM outbox.message_partition_holder(
                   bounds.first_position, bounds.end_position, minimum_age)) THEN
        RETURN NULL;
    END IF;
    SELECT count(*) INTO messages FROM outbox.messages AS m
    WHERE m.position >= bounds.first_position AND m.position < bounds.end_position;
    -- Under the SHARE lock the partition cannot change: read its last message per publication
    -- now, not while writers wait on the parent.
    SELECT array_agg(l.publication_id), array_agg(l.transaction_id), array_agg(l.position)
    INTO publications, transaction_ids, last_positions
    FROM (SELECT DISTINCT ON (m.publication_id) m.publication_id, m.transaction_id, m.position
          FROM outbox.messages AS m
          WHERE m.position >= bounds.first_position AND m.position < bounds.end_position
          ORDER BY m.publication_id, m.transaction_id DESC, m.position DESC) AS l;
    LOCK TABLE outbox.messages IN ACCESS EXCLUSIVE MODE;
    IF EXISTS (SELECT FROM outbox.message_partition_holder(
                   bounds.first_position, bounds.end_position, NULL)) THEN
        RETURN NULL;
    END IF;
    EXECUTE format('DROP TABLE outbox.%I', name);
    INSERT INTO outbox.retired_positions AS r (publication_id, transaction_id, position)
    SELECT * FROM unnest(publications, transaction_ids, last_positions)
    ON CONFLICT (publication_id) DO UPDATE
    SET transaction_id = excluded.transaction_id, position = excluded.position,
        retired_at = excluded.retired_at
    WHERE (r.transaction_id, r.position) < (excluded.transaction_id, excluded.position);
    RETURN messages;
END
$$;
"""

# 0006's function, restored by the downgrade.
RETIRE_WITHOUT_MARKS = """
-- Drops one partition if it may still be retired; returns its message count, or null when
-- something holds it now. Call it in a transaction of its own: the parent's lock is held until
-- commit. Order of locks: first SHARE on the partition, which waits for every transaction that
-- wrote there (a writer could not have committed the rows this check must see) but blocks no
-- one else; then, after the full check, ACCESS EXCLUSIVE on the parent, which DROP needs and
-- which does block writers and readers: only for a re-check of the holders (a seek may have
-- moved a checkpoint back) and the drop. Either wait gives up after lock_wait
-- (lock_not_available), so a long transaction delays retention, never the writers for long.
CREATE FUNCTION outbox.retire_message_partition(
    name text, minimum_age interval, lock_wait interval)
RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    bounds record;
    messages bigint;
BEGIN
    -- SECURITY DEFINER: the name must be one of this table's partitions, nothing else.
    SELECT * INTO bounds FROM outbox.message_partitions() AS p WHERE p.partition_name = name;
    IF NOT FOUND THEN
        RAISE EXCEPTION '% is not a partition of outbox.messages', name
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    PERFORM set_config('lock_timeout', (extract(epoch FROM lock_wait) * 1000)::bigint || 'ms',
                       true);
    EXECUTE format('LOCK TABLE outbox.%I IN SHARE MODE', name);
    IF EXISTS (SELECT FROM outbox.message_partition_holder(
                   bounds.first_position, bounds.end_position, minimum_age)) THEN
        RETURN NULL;
    END IF;
    SELECT count(*) INTO messages FROM outbox.messages AS m
    WHERE m.position >= bounds.first_position AND m.position < bounds.end_position;
    LOCK TABLE outbox.messages IN ACCESS EXCLUSIVE MODE;
    IF EXISTS (SELECT FROM outbox.message_partition_holder(
                   bounds.first_position, bounds.end_position, NULL)) THEN
        RETURN NULL;
    END IF;
    EXECUTE format('DROP TABLE outbox.%I', name);
    RETURN messages;
END
$$;
"""

DROP_RETIRE = "DROP FUNCTION outbox.retire_message_partition(text, interval, interval)"


def upgrade() -> None:
    op.execute(RETIRED_POSITIONS)
    op.execute(GRANT_READ)
    op.execute(DROP_RETIRE)
    op.execute(RETIRE_WITH_MARKS)


def downgrade() -> None:
    op.execute(DROP_RETIRE)
    op.execute(RETIRE_WITHOUT_MARKS)
    op.execute("DROP TABLE outbox.retired_positions")
