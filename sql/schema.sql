-- The outbox schema for DBAs who do not run alembic. It must stay identical to the head of the
-- migration chain in migrations/: tests/integration/test_migrations.py compares the catalogs of
-- a database built each way, and `outbox migrate` adopts a database built from this file.
--
-- Run it as:  psql -v ON_ERROR_STOP=1 -f sql/schema.sql
-- It holds its own BEGIN and COMMIT, so it applies whole or not at all (no need for -1): after an
-- error PostgreSQL aborts the transaction, and the COMMIT at the end then rolls it back.

BEGIN;

CREATE SCHEMA IF NOT EXISTS outbox;

-- The transaction id a new message is ordered by (0017): the greater of the writer's own xid
-- and the newest xid completed when the appending statement took its snapshot
-- (pg_snapshot_xmax is that plus one). Every message a statement can see was appended by a
-- transaction that had completed, so its id is at most that newest one: the new message sorts
-- after it. A plain SQL function, inlined into the INSERT: no call, a few tenths of a
-- microsecond a row.
CREATE FUNCTION outbox.ordering_transaction_id() RETURNS xid8
LANGUAGE sql VOLATILE AS $$
    SELECT greatest(pg_current_xact_id(),
                    (pg_snapshot_xmax(pg_current_snapshot())::text::bigint - 1)::text::xid8)
$$;

-- Partitioned by position range: positions grow with time, so retention retires the oldest
-- partitions whole (no dead rows, no VACUUM debt), and every partition keeps the delivery-order
-- index that the snapshot-safe read walks (a Merge Append of per-partition index scans).
CREATE TABLE outbox.messages (
    position bigint GENERATED ALWAYS AS IDENTITY,
    -- The transaction the message is ordered by: its writer's own, or a newer one that had
    -- completed before it was appended (outbox.ordering_transaction_id), never below the
    -- writer's. Rows become readable only once every transaction that could still commit
    -- below them has ended (see the read_batch query).
    transaction_id xid8 NOT NULL DEFAULT outbox.ordering_transaction_id(),
    publication_id text NOT NULL,
    message_id text NOT NULL,
    message_type text NOT NULL,
    partition_key text NULL,
    data jsonb NOT NULL,
    headers jsonb NOT NULL DEFAULT '{}',
    -- When the message was appended: the writer transaction's start time. Delivery is never
    -- delayed by it; it dates a message for operators and time-windowed consumers.
    appended_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT messages_publication_id_valid
        CHECK (publication_id <> '' AND length(publication_id) <= 200),
    CONSTRAINT messages_message_id_valid
        CHECK (message_id <> '' AND length(message_id) <= 200),
    CONSTRAINT messages_message_type_valid
        CHECK (message_type <> '' AND length(message_type) <= 200),
    CONSTRAINT messages_partition_key_valid
        CHECK (partition_key IS NULL OR (partition_key <> '' AND length(partition_key) <= 200)),
    CONSTRAINT messages_headers_object CHECK (jsonb_typeof(headers) = 'object'),
    CONSTRAINT messages_pkey PRIMARY KEY (position)
) PARTITION BY RANGE (position);

-- Serves the poll query: equality on the publication, then a row comparison on
-- (transaction_id, position) walks the index in delivery order with no sort.
CREATE INDEX messages_delivery_order ON outbox.messages (publication_id, transaction_id, position);

CREATE TABLE outbox.subscriptions (
    subscription_id text PRIMARY KEY,
    publication_id text NOT NULL,
    last_processed_transaction_id xid8 NOT NULL DEFAULT '0',
    last_processed_position bigint NOT NULL DEFAULT 0,
    epoch bigint NOT NULL DEFAULT 0,
    settings jsonb NOT NULL DEFAULT '{}',
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT subscriptions_subscription_id_valid
        CHECK (subscription_id <> '' AND length(subscription_id) <= 200),
    CONSTRAINT subscriptions_publication_id_valid
        CHECK (publication_id <> '' AND length(publication_id) <= 200),
    CONSTRAINT subscriptions_settings_object CHECK (jsonb_typeof(settings) = 'object')
);
-- `outbox parked replay` bumps this; the leader notices at its next lease renewal.
ALTER TABLE outbox.subscriptions ADD COLUMN replay_requests bigint NOT NULL DEFAULT 0;

-- One row per subscription that a daemon leads. Leadership is a lease with a fencing token:
-- every takeover raises the token, and checkpoint writes are conditional on it, so a paused or
-- partitioned former leader can never write again once another process took over.
CREATE TABLE outbox.subscription_leaders (
    subscription_id text PRIMARY KEY
        REFERENCES outbox.subscriptions (subscription_id) ON DELETE CASCADE,
    token bigint NOT NULL,
    holder text NOT NULL,
    host text NOT NULL,
    pid integer NOT NULL,
    since timestamptz NOT NULL,
    expires_at timestamptz NOT NULL,
    -- What the leader's state machine holds (consumers, in flight, retries, draining keys),
    -- written with each checkpoint rather than per message.
    runtime jsonb NOT NULL DEFAULT '{}',
    runtime_at timestamptz NULL
);

-- Messages a subscription gave up on after max_retry_count attempts (or a handler asked to
-- park). The checkpoint passes a message only once its parked row is committed.
CREATE TABLE outbox.parked_messages (
    subscription_id text NOT NULL
        REFERENCES outbox.subscriptions (subscription_id) ON DELETE CASCADE,
    position bigint NOT NULL,
    transaction_id xid8 NOT NULL,
    attempts integer NOT NULL,
    last_error text NOT NULL,
    parked_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (subscription_id, position)
);

-- pg_stat_activity and pg_prepared_xacts show 32-bit xids; the outbox stores xid8. PostgreSQL
-- stops assigning xids before the oldest unfrozen one is 2^31 behind the next, so every running
-- xid is within 2^31 of next_xid: the signed 32-bit distance from next_xid's low half places it
-- in its epoch (the arithmetic of FullXidRelativeTo in PostgreSQL's access/transam.h).
CREATE FUNCTION outbox.widen_xid_around(running xid, next_xid xid8) RETURNS xid8
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    -- Only a corrupt input lands before epoch 0: clamp it to 3, FirstNormalTransactionId.
    SELECT greatest(next_id + CASE WHEN distance >= 2147483648 THEN distance - 4294967296
                                   ELSE distance END, 3)::text::xid8
    FROM (SELECT next_xid::text::bigint AS next_id) AS n,
         LATERAL (SELECT (running::text::bigint - (next_id & 4294967295) + 4294967296)
                         % 4294967296 AS distance) AS d
$$;

-- The snapshot's xmax (latestCompletedXid + 1) stands in for the next xid: reading it assigns
-- no xid to the caller. A transaction still running can hold an xid at or above it; the signed
-- distance puts that one ahead of xmax, in the same epoch.
CREATE FUNCTION outbox.widen_xid(running xid) RETURNS xid8
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT outbox.widen_xid_around(running, pg_snapshot_xmax(pg_current_snapshot()))
$$;

-- Every transaction in the cluster that holds an xid, in any database: each one holds back
-- pg_snapshot_xmin and so every poller. Idle-in-transaction sessions and forgotten prepared
-- transactions are the usual culprits. query_start is the start of a session's SQL with
-- password literals redacted (0018): everything after the word password (ALTER ROLE ...
-- PASSWORD '...', a conninfo's password=...), and a URL's user-info password.
CREATE VIEW outbox.blocking_transactions AS
SELECT 'session'::text AS kind,
       a.pid,
       a.datname AS database,
       a.usename AS user_name,
       a.application_name,
       a.client_addr::text AS client_address,
       a.state,
       a.xact_start AS transaction_start,
       clock_timestamp() - a.xact_start AS transaction_age,
       left(regexp_replace(regexp_replace(a.query, '(password).*$', '\1 ***', 'i'),
                           '(://[^\s/@'']*:)[^\s'']*@', '\1***@', 'g'), 200) AS query_start,
       outbox.widen_xid(a.backend_xid) AS transaction_id
FROM pg_stat_activity AS a
WHERE a.backend_xid IS NOT NULL
UNION ALL
SELECT 'prepared transaction',
       NULL,
       p.database,
       p.owner,
       p.gid,
       NULL,
       'prepared',
       p.prepared,
       clock_timestamp() - p.prepared,
       NULL,
       outbox.widen_xid(p.transaction)
FROM pg_prepared_xacts AS p;

-- Per subscription: where it stands, how far behind, who leads it, what holds it back, and
-- why its handler's destination cannot take messages now (a relay's broker down; 0012).
CREATE VIEW outbox.subscription_status AS
SELECT s.subscription_id,
       s.publication_id,
       s.last_processed_transaction_id AS checkpoint_transaction_id,
       s.last_processed_position AS checkpoint_position,
       s.epoch,
       coalesce(behind.messages, 0) AS messages_behind,
       clock_timestamp() - behind.oldest_appended_at AS oldest_undelivered_age,
       leader.host AS leader_host,
       leader.pid AS leader_pid,
       leader.since AS leader_since,
       coalesce(leader.expires_at > clock_timestamp(), false) AS leader_alive,
       coalesce((leader.runtime ->> 'consumers')::int, 0) AS consumers,
       coalesce((leader.runtime ->> 'in_flight')::int, 0) AS in_flight,
       coalesce((leader.runtime ->> 'retry_queue')::int, 0) AS retry_queue,
       coalesce((leader.runtime ->> 'buffered')::int, 0) AS buffered,
       coalesce(leader.runtime -> 'draining_keys', '[]') AS draining_keys,
       parked.messages AS parked_messages,
       clock_timestamp() - parked.oldest AS oldest_parked_age,
       hidden.oldest_transaction_id AS oldest_hidden_transaction_id,
       blockers.pids AS blocked_by_pids,
       blockers.description AS blocked_by,
       CASE WHEN leader.expires_at > clock_timestamp()
            THEN leader.runtime ->> 'destination_unavailable' END AS destination_unavailable
FROM outbox.subscriptions AS s
LEFT JOIN outbox.subscription_leaders AS leader USING (subscription_id)
LEFT JOIN LATERAL (
    SELECT count(*) AS messages, min(m.appended_at) AS oldest_appended_at
    FROM outbox.messages AS m
    WHERE m.publication_id = s.publication_id
      AND (m.transaction_id, m.position)
          > (s.last_processed_transaction_id, s.last_processed_position)
) AS behind ON true
LEFT JOIN LATERAL (
    SELECT count(*) AS messages, min(p.parked_at) AS oldest
    FROM outbox.parked_messages AS p WHERE p.subscription_id = s.subscription_id
) AS parked ON true
LEFT JOIN LATERAL (
    SELECT min(m.transaction_id) AS oldest_transaction_id
    FROM outbox.messages AS m
    WHERE m.publication_id = s.publication_id
      AND (m.transaction_id, m.position)
          > (s.last_processed_transaction_id, s.last_processed_position)
      AND m.transaction_id >= pg_snapshot_xmin(pg_current_snapshot())
) AS hidden ON true
LEFT JOIN LATERAL (
    SELECT array_agg(b.pid ORDER BY b.transaction_start) FILTER (WHERE b.pid IS NOT NULL) AS pids,
           string_agg(
               format('%s %s (%s, %s, %s, in transaction for %s)', b.kind,
                      coalesce(b.pid::text, b.application_name), b.database, b.user_name,
                      b.state, date_trunc('second', b.transaction_age)),
               '; ' ORDER BY b.transaction_start) AS description
    FROM outbox.blocking_transactions AS b
    WHERE b.transaction_id < hidden.oldest_transaction_id
) AS blockers ON true;

-- Where each catch-up consumer (poller.subscribe) stands: written by the consumer inside the
-- transaction that writes its own output (poller.store_checkpoint), so the output and the
-- position commit together and a restart resumes exactly after what was written.
CREATE TABLE outbox.consumer_positions (
    consumer_name text PRIMARY KEY,
    transaction_id xid8 NOT NULL,
    position bigint NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT consumer_positions_consumer_name_valid
        CHECK (consumer_name <> '' AND length(consumer_name) <= 200)
);
-- The partitions of outbox.messages, oldest first, with the positions each one takes:
-- first_position <= position < end_position.
CREATE FUNCTION outbox.message_partitions()
RETURNS TABLE (partition_name text, first_position bigint, end_position bigint)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    SELECT c.relname::text, bounds[1]::bigint, bounds[2]::bigint
    FROM pg_inherits AS i
    JOIN pg_class AS c ON c.oid = i.inhrelid,
         LATERAL regexp_match(pg_get_expr(c.relpartbound, c.oid),
                              'FROM \(''?(-?[0-9]+)''?\) TO \(''?(-?[0-9]+)''?\)') AS bounds
    WHERE i.inhparent = 'outbox.messages'::regclass
    ORDER BY 2
$$;

-- The position the identity hands out next (rows below it may still be in flight).
CREATE FUNCTION outbox.next_message_position() RETURNS bigint
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    SELECT coalesce(pg_sequence_last_value(
        pg_get_serial_sequence('outbox.messages', 'position')::regclass), 0) + 1
$$;

-- Creates the partitions that take positions up to `partitions_ahead` partitions past the next
-- position; returns their names. CREATE TABLE ... PARTITION OF would lock the parent ACCESS
-- EXCLUSIVE, queueing every writer behind any open transaction; a table created apart and
-- then attached takes only SHARE UPDATE EXCLUSIVE on the parent, which writers and readers do
-- not conflict with (PostgreSQL docs, "Partition Maintenance").
CREATE FUNCTION outbox.create_message_partitions(
    partition_size bigint, partitions_ahead integer, from_position bigint DEFAULT NULL)
RETURNS SETOF text
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    covered_end bigint;
    wanted_end bigint;
    name text;
BEGIN
    IF partition_size IS NULL OR partition_size < 1 THEN
        RAISE EXCEPTION 'partition_size must be at least 1, got %', partition_size
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF partitions_ahead IS NULL OR partitions_ahead < 1 THEN
        RAISE EXCEPTION 'partitions_ahead must be at least 1, got %', partitions_ahead
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- Two daemons creating at once would pick the same names; the second waits, then finds
    -- the first one's partitions (each statement below takes a new snapshot).
    PERFORM pg_advisory_xact_lock(hashtextextended('outbox.create_message_partitions', 0));
    wanted_end := outbox.next_message_position() + partitions_ahead * partition_size;
    SELECT max(p.end_position) INTO covered_end FROM outbox.message_partitions() AS p;
    IF covered_end IS NULL THEN
        covered_end := (coalesce(from_position, outbox.next_message_position()) / partition_size)
                       * partition_size;
    END IF;
    WHILE covered_end < wanted_end LOOP
        name := 'messages_from_' || covered_end;
        EXECUTE format('CREATE TABLE outbox.%I (LIKE outbox.messages INCLUDING CONSTRAINTS)',
                       name);
        -- Unique within the partition; across partitions the writer's advisory lock keeps
        -- (publication_id, message_id) unique.
        EXECUTE format('CREATE UNIQUE INDEX %I ON outbox.%I (publication_id, message_id)',
                       name || '_message_id', name);
        EXECUTE format('ALTER TABLE outbox.messages ATTACH PARTITION outbox.%I'
                       ' FOR VALUES FROM (%s) TO (%s)',
                       name, covered_end, covered_end + partition_size);
        RETURN NEXT name;
        covered_end := covered_end + partition_size;
    END LOOP;
END
$$;

-- What keeps the partition taking [first_position, end_position) from being retired, the
-- first reason found (no row: nothing): 'unfilled' (positions still to be handed out),
-- 'subscription' or 'spark' (a subscription whose checkpoint, or one of whose shards'
-- checkpoints, has not passed one of its messages there), 'consumer' (an
-- outbox.consumer_positions row behind one of them), 'archive' (0019: a message of an archived
-- publication there after the archive's mark; holder: the publication), 'parked' (a parked
-- message there), 'minimum age' (a message appended less than minimum_age ago; not checked
-- when minimum_age is null). held_since: when the oldest message held was appended (the
-- parking time for 'parked', the newest message's for 'minimum age').
CREATE FUNCTION outbox.message_partition_holder(
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
    RETURN QUERY
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

-- The partitions that could be retired now, oldest first, with their message counts. A
-- partition held by a checkpoint, a consumer, its fill or its age holds every later one too
-- (all of them grow together), so the walk stops there; one held by a parked message is
-- skipped.
CREATE FUNCTION outbox.retirable_message_partitions(minimum_age interval)
RETURNS TABLE (partition_name text, first_position bigint, end_position bigint, messages bigint)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    candidate record;
    reason text;
BEGIN
    IF minimum_age IS NULL OR minimum_age < interval '0' THEN
        RAISE EXCEPTION 'minimum_age must be zero or more, got %', minimum_age
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    FOR candidate IN SELECT * FROM outbox.message_partitions() LOOP
        SELECT h.kind INTO reason
        FROM outbox.message_partition_holder(
            candidate.first_position, candidate.end_position, minimum_age) AS h;
        EXIT WHEN reason IS NOT NULL AND reason <> 'parked';
        CONTINUE WHEN reason = 'parked';
        partition_name := candidate.partition_name;
        first_position := candidate.first_position;
        end_position := candidate.end_position;
        SELECT count(*) INTO messages FROM outbox.messages AS m
        WHERE m.position >= candidate.first_position AND m.position < candidate.end_position;
        RETURN NEXT;
    END LOOP;
END
$$;

-- Per publication, the last message (in delivery order) of every partition retention has
-- dropped: a reader resuming after a position below it would never see the retired messages
-- after that position, so catch-up subscriptions and the operator's create and seek refuse it
-- (see docs/explanation/retention.md). Written only by
-- outbox.retire_message_partition, in the transaction of the drop.
CREATE TABLE outbox.retired_positions (
    publication_id text PRIMARY KEY,
    transaction_id xid8 NOT NULL,
    position bigint NOT NULL,
    retired_at timestamptz NOT NULL DEFAULT now()
);

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

-- Per partition, what holds it back and since when (age aside: the minimum age is the
-- daemon's setting). `outbox status` reads it to name the subscription that holds retention.
CREATE VIEW outbox.retention_status AS
SELECT p.partition_name,
       p.first_position,
       p.end_position,
       h.kind AS held_by_kind,
       h.holder AS held_by,
       h.held_since
FROM outbox.message_partitions() AS p
LEFT JOIN LATERAL outbox.message_partition_holder(p.first_position, p.end_position, NULL) AS h
       ON true;

-- The first partitions; the daemon creates more ahead of need (--partitions-ahead).
SELECT outbox.create_message_partitions(1000000, 2);
-- Least-privilege roles (see outbox/roles.py and migrations/versions/0007_roles.py): created
-- when missing (they are cluster-wide, so another database may have made them), then granted
-- what each needs here. The names are <prefix>_writer, _poller and _reader; the prefix is the
-- outbox.role_prefix setting, `outbox` when unset: PGOPTIONS='-c outbox.role_prefix=shop'.
DO $roles$
DECLARE
    prefix text := coalesce(nullif(current_setting('outbox.role_prefix', true), ''), 'outbox');
    writer text := prefix || '_writer';
    poller text := prefix || '_poller';
    reader text := prefix || '_reader';
    role_name text;
BEGIN
    FOREACH role_name IN ARRAY ARRAY[writer, poller, reader] LOOP
        IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = role_name) THEN
            BEGIN
                EXECUTE format('CREATE ROLE %I NOLOGIN', role_name);
            EXCEPTION WHEN duplicate_object OR unique_violation THEN
                -- Another database of the cluster created it after our check: a concurrent
                -- CREATE ROLE waits for the first to commit, then fails on pg_authid's key.
                NULL;
            END;
        END IF;
    END LOOP;
    EXECUTE format('GRANT USAGE ON SCHEMA outbox TO %I, %I, %I', writer, poller, reader);
    EXECUTE format(
        'GRANT INSERT (publication_id, message_id, message_type, partition_key, data, headers),'
        ' SELECT (position, publication_id, message_id) ON outbox.messages TO %I', writer);
    EXECUTE format(
        'GRANT SELECT ON outbox.messages, outbox.subscriptions, outbox.subscription_leaders,'
        ' outbox.parked_messages, outbox.subscription_status, outbox.blocking_transactions'
        ' TO %I', poller);
    EXECUTE format(
        'GRANT UPDATE (last_processed_transaction_id, last_processed_position, updated_at)'
        ' ON outbox.subscriptions TO %I', poller);
    EXECUTE format(
        'GRANT INSERT, UPDATE, DELETE ON outbox.subscription_leaders, outbox.parked_messages'
        ' TO %I', poller);
    EXECUTE format(
        'GRANT SELECT ON outbox.subscription_status, outbox.blocking_transactions,'
        ' outbox.parked_messages TO %I', reader);
    -- A consumer that stores its own position (outbox.consumer_positions, where present).
    IF to_regclass('outbox.consumer_positions') IS NOT NULL THEN
        EXECUTE format(
            'GRANT SELECT, INSERT, UPDATE, DELETE ON outbox.consumer_positions TO %I', poller);
    END IF;
END
$roles$;
-- `outbox skip NAME --to TX:POS` leaves a request here, with the epoch it was made in; the
-- leader applies it at its next lease renewal and clears it once the stored checkpoint has
-- reached it (a seek makes it void: its epoch is over).
ALTER TABLE outbox.subscriptions
    ADD COLUMN skip_to_transaction_id xid8 NULL,
    ADD COLUMN skip_to_position bigint NULL,
    ADD COLUMN skip_epoch bigint NULL,
    ADD CONSTRAINT subscriptions_skip_request_whole
        CHECK ((skip_to_transaction_id IS NULL) = (skip_to_position IS NULL)
               AND (skip_to_position IS NULL) = (skip_epoch IS NULL));

-- A least-privilege poller (0007) clears the request it has applied.
DO $grant$
DECLARE
    poller text := coalesce(nullif(current_setting('outbox.role_prefix', true), ''), 'outbox')
                   || '_poller';
BEGIN
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = poller) THEN
        EXECUTE format('GRANT UPDATE (skip_to_transaction_id, skip_to_position, skip_epoch)'
                       ' ON outbox.subscriptions TO %I', poller);
    END IF;
END
$grant$;

-- An append with an explicit message_id in one round trip (migration 0009): the lock, then the
-- lookup, then the insert. PL/pgSQL gives each statement a fresh snapshot under READ COMMITTED,
-- so the lookup after the lock sees a duplicate committed while this transaction waited for it;
-- one statement taking the lock in a CTE would look with the snapshot it started with. The key
-- is outbox.append_messages' too, so single and batch appends exclude each other.
CREATE FUNCTION outbox.append_message(
    publication text,
    message_id text,
    message_type text,
    partition_key text,
    data jsonb,
    headers jsonb
) RETURNS bigint
LANGUAGE plpgsql
AS $function$
DECLARE
    appended bigint;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended(
        length(append_message.publication) || ':' || append_message.publication
        || append_message.message_id, 0));
    SELECT m.position INTO appended
    FROM outbox.messages AS m
    WHERE m.publication_id = append_message.publication
      AND m.message_id = append_message.message_id;
    IF appended IS NOT NULL THEN
        RETURN appended;
    END IF;
    INSERT INTO outbox.messages
        (publication_id, message_id, message_type, partition_key, data, headers)
    VALUES (append_message.publication, append_message.message_id, append_message.message_type,
            append_message.partition_key, append_message.data, append_message.headers)
    RETURNING position INTO appended;
    RETURN appended;
END
$function$;

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

-- A batch with message_ids in one round trip (migration 0011): the locks on the given ids, in
-- key order so two batches cannot deadlock, then the lookup and the insert in one statement,
-- whose snapshot PL/pgSQL takes after the locks (one per statement under READ COMMITTED). One
-- call, so the locks hold on an autocommit connection too: taken by a statement of their own,
-- they were gone before the next one looked. A null id is a fresh UUID, neither locked nor
-- looked up. Returns the positions in the order given: an existing id's position, the first
-- row's for an id repeated in the batch. The key is outbox.append_message's.
CREATE FUNCTION outbox.append_messages(
    publication text,
    message_ids text[],
    message_types text[],
    partition_keys text[],
    data jsonb[],
    headers jsonb[]
) RETURNS bigint[]
LANGUAGE plpgsql
AS $function$
DECLARE
    positions bigint[];
BEGIN
    PERFORM pg_advisory_xact_lock(keys.lock_key)
    FROM (SELECT DISTINCT hashtextextended(
              length(append_messages.publication) || ':' || append_messages.publication
              || given.message_id, 0) AS lock_key
          FROM unnest(append_messages.message_ids) AS given(message_id)
          WHERE given.message_id IS NOT NULL
          ORDER BY lock_key) AS keys;
    WITH input AS (
        SELECT coalesce(t.message_id, gen_random_uuid()::text) AS message_id, t.message_type,
               t.partition_key, t.message_data, t.message_headers, t.ordinal
        FROM unnest(append_messages.message_ids, append_messages.message_types,
                    append_messages.partition_keys, append_messages.data,
                    append_messages.headers)
             WITH ORDINALITY AS t(message_id, message_type, partition_key, message_data,
                                  message_headers, ordinal)
    ),
    existing AS (
        SELECT m.message_id, m.position FROM outbox.messages AS m
        WHERE m.publication_id = append_messages.publication
          AND m.message_id = ANY(append_messages.message_ids)
    ),
    fresh AS (
        SELECT DISTINCT ON (input.message_id) input.*
        FROM input
        WHERE NOT EXISTS (SELECT FROM existing WHERE existing.message_id = input.message_id)
        ORDER BY input.message_id, input.ordinal
    ),
    inserted AS (
        INSERT INTO outbox.messages
            (publication_id, message_id, message_type, partition_key, data, headers)
        SELECT append_messages.publication, fresh.message_id, fresh.message_type,
               fresh.partition_key, fresh.message_data, fresh.message_headers
        FROM fresh
        ORDER BY fresh.ordinal
        RETURNING outbox.messages.message_id, outbox.messages.position
    )
    SELECT array_agg(coalesce(inserted.position, existing.position) ORDER BY input.ordinal)
    INTO positions
    FROM input
    LEFT JOIN inserted ON inserted.message_id = input.message_id
    LEFT JOIN existing ON existing.message_id = input.message_id;
    RETURN positions;
END
$function$;

-- Shards (0013): one subscription led by many processes, a lease, checkpoint and parked set
-- per shard. A message's shard among N: the first 4 bytes of the MD5 of its partition key, read
-- as an unsigned big-endian integer, modulo N; a keyless message's position modulo N. Not
-- crc32: inside a shard `pinned` places keys on consumers by crc32 modulo the consumer count,
-- and the same hash would put every key of shard 0 of 2 on even consumers only.
CREATE FUNCTION outbox.message_shard(
    partition_key text, message_position bigint, shard_count integer)
RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT ((CASE WHEN partition_key IS NULL THEN message_position
                  ELSE ('x' || left(md5(partition_key), 8))::bit(32)::bigint END)
            % shard_count)::integer
$$;

-- shard_count is the layout the subscription is in; during a change of it, the old count is
-- draining_shard_count: its shards finish every message up to the barrier (the end of the
-- transactions older than the change), and the new shards start after the barrier only once
-- they have (see docs/explanation/shards.md). last_processed_* is then the floor: the
-- lowest checkpoint of any shard, which retention, the status view and `outbox skip` read.
ALTER TABLE outbox.subscriptions
    ADD COLUMN shard_count integer NOT NULL DEFAULT 1,
    ADD COLUMN draining_shard_count integer NULL,
    ADD COLUMN shard_barrier_transaction_id xid8 NULL,
    ADD COLUMN shard_barrier_position bigint NULL,
    ADD CONSTRAINT subscriptions_shard_count_valid CHECK (shard_count BETWEEN 1 AND 256),
    ADD CONSTRAINT subscriptions_shard_change_whole
        CHECK ((draining_shard_count IS NULL) = (shard_barrier_transaction_id IS NULL)
               AND (shard_barrier_transaction_id IS NULL) = (shard_barrier_position IS NULL)
               AND draining_shard_count IS DISTINCT FROM shard_count);

-- Each shard's checkpoint, for a subscription with more than one shard or in a change of its
-- count (a subscription of one shard keeps its checkpoint in outbox.subscriptions alone).
CREATE TABLE outbox.subscription_shards (
    subscription_id text NOT NULL
        REFERENCES outbox.subscriptions (subscription_id) ON DELETE CASCADE,
    shard_count integer NOT NULL,
    shard integer NOT NULL,
    last_processed_transaction_id xid8 NOT NULL,
    last_processed_position bigint NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (subscription_id, shard_count, shard),
    CONSTRAINT subscription_shards_shard_valid CHECK (shard >= 0 AND shard < shard_count)
);

-- A lease per shard. bounded: its term began while its shard drained, so it knows of the change
-- (set when the lease was taken during a change); an unbounded lease of an old layout holds the
-- change until its term ends.
ALTER TABLE outbox.subscription_leaders
    ADD COLUMN shard_count integer NOT NULL DEFAULT 1,
    ADD COLUMN shard integer NOT NULL DEFAULT 0,
    ADD COLUMN bounded boolean NOT NULL DEFAULT false,
    DROP CONSTRAINT subscription_leaders_pkey,
    ADD PRIMARY KEY (subscription_id, shard_count, shard);

-- The `outbox poll` processes that share a subscription's shards, each renewing its row; the
-- live ones split the shards between them (poller/membership/assignment.py).
CREATE TABLE outbox.subscription_members (
    subscription_id text NOT NULL
        REFERENCES outbox.subscriptions (subscription_id) ON DELETE CASCADE,
    member text NOT NULL,
    host text NOT NULL,
    pid integer NOT NULL,
    since timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL,
    PRIMARY KEY (subscription_id, member)
);

-- Per subscription: where it stands (the floor of its shards), how far behind, who leads it
-- (of several shards: a live leader, shards of the current count first), its leaders' figures
-- summed, what holds it back, why its destination cannot take messages now, and its shards.
CREATE OR REPLACE VIEW outbox.subscription_status AS
SELECT s.subscription_id,
       s.publication_id,
       s.last_processed_transaction_id AS checkpoint_transaction_id,
       s.last_processed_position AS checkpoint_position,
       s.epoch,
       coalesce(behind.messages, 0) AS messages_behind,
       clock_timestamp() - behind.oldest_appended_at AS oldest_undelivered_age,
       leader.host AS leader_host,
       leader.pid AS leader_pid,
       leader.since AS leader_since,
       coalesce(leader.expires_at > clock_timestamp(), false) AS leader_alive,
       coalesce(leaders.consumers, 0) AS consumers,
       coalesce(leaders.in_flight, 0) AS in_flight,
       coalesce(leaders.retry_queue, 0) AS retry_queue,
       coalesce(leaders.buffered, 0) AS buffered,
       coalesce(leaders.draining_keys, '[]') AS draining_keys,
       parked.messages AS parked_messages,
       clock_timestamp() - parked.oldest AS oldest_parked_age,
       hidden.oldest_transaction_id AS oldest_hidden_transaction_id,
       blockers.pids AS blocked_by_pids,
       blockers.description AS blocked_by,
       leaders.destination_unavailable,
       s.shard_count AS shards,
       s.draining_shard_count AS draining_shards
FROM outbox.subscriptions AS s
LEFT JOIN LATERAL (
    SELECT l.host, l.pid, l.since, l.expires_at
    FROM outbox.subscription_leaders AS l
    WHERE l.subscription_id = s.subscription_id
    ORDER BY l.expires_at > clock_timestamp() DESC, l.shard_count = s.shard_count DESC, l.shard
    LIMIT 1
) AS leader ON true
LEFT JOIN LATERAL (
    SELECT sum((l.runtime ->> 'consumers')::int)::int AS consumers,
           sum((l.runtime ->> 'in_flight')::int)::int AS in_flight,
           sum((l.runtime ->> 'retry_queue')::int)::int AS retry_queue,
           sum((l.runtime ->> 'buffered')::int)::int AS buffered,
           (SELECT jsonb_agg(k) FROM outbox.subscription_leaders AS d,
                   jsonb_array_elements(coalesce(d.runtime -> 'draining_keys', '[]')) AS k
            WHERE d.subscription_id = s.subscription_id) AS draining_keys,
           min(l.runtime ->> 'destination_unavailable')
               FILTER (WHERE l.expires_at > clock_timestamp()) AS destination_unavailable
    FROM outbox.subscription_leaders AS l
    WHERE l.subscription_id = s.subscription_id
) AS leaders ON true
LEFT JOIN LATERAL (
    SELECT count(*) AS messages, min(m.appended_at) AS oldest_appended_at
    FROM outbox.messages AS m
    WHERE m.publication_id = s.publication_id
      AND (m.transaction_id, m.position)
          > (s.last_processed_transaction_id, s.last_processed_position)
) AS behind ON true
LEFT JOIN LATERAL (
    SELECT count(*) AS messages, min(p.parked_at) AS oldest
    FROM outbox.parked_messages AS p WHERE p.subscription_id = s.subscription_id
) AS parked ON true
LEFT JOIN LATERAL (
    SELECT min(m.transaction_id) AS oldest_transaction_id
    FROM outbox.messages AS m
    WHERE m.publication_id = s.publication_id
      AND (m.transaction_id, m.position)
          > (s.last_processed_transaction_id, s.last_processed_position)
      AND m.transaction_id >= pg_snapshot_xmin(pg_current_snapshot())
) AS hidden ON true
LEFT JOIN LATERAL (
    SELECT array_agg(b.pid ORDER BY b.transaction_start) FILTER (WHERE b.pid IS NOT NULL) AS pids,
           string_agg(
               format('%s %s (%s, %s, %s, in transaction for %s)', b.kind,
                      coalesce(b.pid::text, b.application_name), b.database, b.user_name,
                      b.state, date_trunc('second', b.transaction_age)),
               '; ' ORDER BY b.transaction_start) AS description
    FROM outbox.blocking_transactions AS b
    WHERE b.transaction_id < hidden.oldest_transaction_id
) AS blockers ON true;

-- Per shard of every subscription (one row, shard 0 of 1, for a subscription of one shard):
-- its checkpoint, the messages of that shard after it (a draining shard's: up to the barrier),
-- and its leader. The backlog is read once per subscription, from its floor, each message's
-- shard computed once per shard count, not once per shard.
CREATE VIEW outbox.subscription_shard_status AS
WITH units AS (
    SELECT s.subscription_id, s.publication_id, u.shard_count, u.shard,
           coalesce(u.shard_count = s.draining_shard_count, false) AS draining,
           u.transaction_id, u.position
    FROM outbox.subscriptions AS s
    CROSS JOIN LATERAL (
        SELECT sh.shard_count, sh.shard, sh.last_processed_transaction_id AS transaction_id,
               sh.last_processed_position AS position
        FROM outbox.subscription_shards AS sh
        WHERE sh.subscription_id = s.subscription_id
        UNION ALL
        SELECT 1, 0, s.last_processed_transaction_id, s.last_processed_position
        WHERE NOT EXISTS (SELECT FROM outbox.subscription_shards AS sh
                          WHERE sh.subscription_id = s.subscription_id)
    ) AS u
),
behind AS (
    -- Grouped by the columns it is joined on, so a query that names no count drops it.
    SELECT s.subscription_id, counted.shard_count, counted.shard,
           sum(counted.messages)::bigint AS messages
    FROM outbox.subscriptions AS s
    CROSS JOIN LATERAL (
        SELECT u.shard_count, u.shard, count(*) AS messages
        FROM (
            -- Each message of the backlog with its shard under each count (OFFSET 0: planned
            -- on its own, so the backlog is read once, not once per shard).
            SELECT m.transaction_id, m.position, c.shard_count,
                   CASE WHEN c.shard_count = 1 THEN 0
                        ELSE outbox.message_shard(m.partition_key, m.position, c.shard_count)
                   END AS shard
            FROM outbox.messages AS m
            CROSS JOIN (VALUES (s.shard_count), (s.draining_shard_count)) AS c(shard_count)
            WHERE m.publication_id = s.publication_id
              AND (m.transaction_id, m.position)
                  > (s.last_processed_transaction_id, s.last_processed_position)
              AND c.shard_count IS NOT NULL
              AND (c.shard_count IS DISTINCT FROM s.draining_shard_count
                   OR (m.transaction_id, m.position)
                      <= (s.shard_barrier_transaction_id, s.shard_barrier_position))
            OFFSET 0
        ) AS placed
        JOIN units AS u
          ON u.subscription_id = s.subscription_id AND u.shard_count = placed.shard_count
         AND u.shard = placed.shard
        WHERE (placed.transaction_id, placed.position) > (u.transaction_id, u.position)
        GROUP BY u.shard_count, u.shard
    ) AS counted
    GROUP BY s.subscription_id, counted.shard_count, counted.shard
)
SELECT u.subscription_id,
       u.publication_id,
       u.shard_count,
       u.shard,
       u.draining,
       u.transaction_id AS checkpoint_transaction_id,
       u.position AS checkpoint_position,
       coalesce(behind.messages, 0) AS messages_behind,
       leader.host AS leader_host,
       leader.pid AS leader_pid,
       leader.since AS leader_since,
       coalesce(leader.expires_at > clock_timestamp(), false) AS leader_alive
FROM units AS u
LEFT JOIN behind USING (subscription_id, shard_count, shard)
LEFT JOIN outbox.subscription_leaders AS leader
       ON leader.subscription_id = u.subscription_id
      AND leader.shard_count = u.shard_count AND leader.shard = u.shard;

-- A least-privilege poller (0007) renews its membership, moves shard checkpoints and the
-- floor, and ends a change of the shard count once its barrier is passed; readers see shards.
DO $grant$
DECLARE
    prefix text := coalesce(nullif(current_setting('outbox.role_prefix', true), ''), 'outbox');
BEGIN
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = prefix || '_poller') THEN
        EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON outbox.subscription_members,'
                       ' outbox.subscription_shards TO %I', prefix || '_poller');
        EXECUTE format('GRANT UPDATE (draining_shard_count, shard_barrier_transaction_id,'
                       ' shard_barrier_position) ON outbox.subscriptions TO %I',
                       prefix || '_poller');
        EXECUTE format('GRANT SELECT ON outbox.subscription_shard_status TO %I',
                       prefix || '_poller');
    END IF;
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = prefix || '_reader') THEN
        EXECUTE format('GRANT SELECT ON outbox.subscription_shard_status,'
                       ' outbox.subscription_shards TO %I', prefix || '_reader');
    END IF;
END
$grant$;

-- The reader (0007) runs `outbox status`, `subscription list` and `subscription show` (0014).
DO $grant$
DECLARE
    prefix text := coalesce(nullif(current_setting('outbox.role_prefix', true), ''), 'outbox');
BEGIN
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = prefix || '_reader') THEN
        EXECUTE format('GRANT SELECT ON outbox.subscriptions, outbox.retention_status TO %I',
                       prefix || '_reader');
    END IF;
END
$grant$;

-- `outbox parked replay` marks a parked row; its shard's leader replays the marked rows at its
-- next lease renewal, or when it starts leading (0016).
ALTER TABLE outbox.parked_messages ADD COLUMN replay_requested_at timestamptz NULL;

-- Closes the partition that takes the next position once its first message is older than
-- minimum_age (0016): the position identity jumps to the first position of the next partition
-- (made ahead), so the closed one no longer counts as unfilled and is retired, as a partition
-- filled by size is, once every holder has passed it and its newest message is older than
-- minimum_age. Without it a publication writing a few messages a day filled a partition of 1M
-- positions in years and kept every message that long. Returns the closed partition's name,
-- or null: no message older than minimum_age there, no partition made ahead to move to, or
-- filled meanwhile. The jump waits for SHARE on outbox.messages, which every writing
-- transaction holds off until it ends (and holds new ones off until this one commits, at most
-- lock_wait: lock_not_available then, and the next pass tries again): no position is being
-- handed out while the identity moves, so it never moves back below one taken.
CREATE FUNCTION outbox.close_message_partition_by_age(minimum_age interval, lock_wait interval)
RETURNS text
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    next_position bigint;
    filling record;
    first_appended timestamptz;
BEGIN
    IF minimum_age IS NULL OR minimum_age < interval '0' THEN
        RAISE EXCEPTION 'minimum_age must be zero or more, got %', minimum_age
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- outbox.create_message_partitions' lock: the partition moved to cannot be created or
    -- counted twice meanwhile.
    PERFORM pg_advisory_xact_lock(hashtextextended('outbox.create_message_partitions', 0));
    next_position := outbox.next_message_position();
    SELECT * INTO filling FROM outbox.message_partitions() AS p
    WHERE p.first_position <= next_position AND next_position < p.end_position;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    -- The first message by position (the primary key finds it), not the oldest appended_at,
    -- which would need a scan: they differ by at most a writer transaction's length.
    SELECT m.appended_at INTO first_appended FROM outbox.messages AS m
    WHERE m.position >= filling.first_position AND m.position < filling.end_position
    ORDER BY m.position LIMIT 1;
    IF first_appended IS NULL OR first_appended > clock_timestamp() - minimum_age THEN
        RETURN NULL;
    END IF;
    IF NOT EXISTS (SELECT FROM outbox.message_partitions() AS p
                   WHERE p.first_position = filling.end_position) THEN
        RETURN NULL;
    END IF;
    PERFORM set_config('lock_timeout', (extract(epoch FROM lock_wait) * 1000)::bigint || 'ms',
                       true);
    LOCK TABLE ONLY outbox.messages IN SHARE MODE;
    IF outbox.next_message_position() >= filling.end_position THEN
        RETURN NULL;
    END IF;
    PERFORM setval(pg_get_serial_sequence('outbox.messages', 'position'),
                   filling.end_position - 1);
    RETURN filling.partition_name;
END
$$;

-- The poller (0007) runs `outbox status`, which names what holds retention back (0016).
DO $grant$
DECLARE
    poller text := coalesce(nullif(current_setting('outbox.role_prefix', true), ''), 'outbox')
                   || '_poller';
BEGIN
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = poller) THEN
        EXECUTE format('GRANT SELECT ON outbox.retention_status TO %I', poller);
    END IF;
END
$grant$;

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

COMMIT;
