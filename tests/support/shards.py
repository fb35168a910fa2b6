"""A sharded subscription as the database shows it: who leads which shard, whether a change of
the shard count is still draining, whether every shard has caught up, and (once a test asks)
every move of a shard's checkpoint and every change of hands of a shard's lease, recorded by
triggers, so no sampler can miss one.

Read through the test's probe connection (tests.support.databases.probe): these are polled.
"""

from collections import Counter
from collections.abc import Collection
from typing import Any, NamedTuple

import psycopg

from outbox.positions import Position
from tests.support.daemons import wait_until
from tests.support.databases import probe
from tests.support.stored import HOLDER_PREFIX

# Who leads each shard ------------------------------------------------------------------------

# The alive leases of the subscription's current shard count, outside a change of the count.
CURRENT_LEADERS = """
SELECT l.shard, l.pid
FROM outbox.subscriptions AS s
JOIN outbox.subscription_leaders AS l
  ON l.subscription_id = s.subscription_id AND l.shard_count = s.shard_count
WHERE s.subscription_id = %s AND s.draining_shard_count IS NULL
  AND l.expires_at > clock_timestamp()
"""


def shard_count(url: str, subscription: str) -> int:
    row = (
        probe(url)
        .execute(
            "SELECT shard_count FROM outbox.subscriptions WHERE subscription_id = %s",
            (subscription,),
        )
        .fetchone()
    )
    assert row is not None, f"no subscription {subscription!r}"
    return int(row[0])


def current_leaders(url: str, subscription: str) -> dict[int, int]:
    """Shard -> pid of its alive lease, for the current count (empty during a change)."""
    rows = probe(url).execute(CURRENT_LEADERS, (subscription,)).fetchall()
    return {shard: pid for shard, pid in rows}


def balanced_over(leaders: dict[int, int], shards: int, pids: Collection[int]) -> bool:
    """Every shard led, by `pids` only, each of them leading the floor or the ceiling of
    shards / processes (the assignment's promise)."""
    if set(leaders) != set(range(shards)) or set(leaders.values()) != set(pids):
        return False
    counts = Counter(leaders.values())
    return max(counts.values()) - min(counts.values()) <= 1


def wait_for_assignment(
    url: str, subscription: str, pids: Collection[int], timeout: float = 30
) -> dict[int, int]:
    """Wait until the processes `pids`, and no other, lead every shard of the current count,
    balanced, outside a change of the count; the shard -> pid map."""

    def balanced() -> dict[int, int] | None:
        leaders = current_leaders(url, subscription)
        return leaders if balanced_over(leaders, shard_count(url, subscription), pids) else None

    return wait_until(
        balanced,
        timeout,
        f"processes {sorted(pids)} to share the shards of {subscription}",
    )


class ShardLease(NamedTuple):
    shard_count: int
    shard: int
    token: int
    holder: str
    pid: int
    alive: bool


def shard_leases(url: str, subscription: str) -> list[ShardLease]:
    """Every lease row of the subscription, of any shard count."""
    rows = (
        probe(url)
        .execute(
            "SELECT shard_count, shard, token, holder, pid, expires_at > clock_timestamp()"
            " FROM outbox.subscription_leaders WHERE subscription_id = %s"
            " ORDER BY shard_count, shard",
            (subscription,),
        )
        .fetchall()
    )
    return [ShardLease(*row) for row in rows]


def live_members(url: str, subscription: str) -> list[int]:
    """The pids of the processes whose membership has not run out."""
    rows = (
        probe(url)
        .execute(
            "SELECT pid FROM outbox.subscription_members"
            " WHERE subscription_id = %s AND expires_at > clock_timestamp() ORDER BY pid",
            (subscription,),
        )
        .fetchall()
    )
    return [row[0] for row in rows]


def applied_consumers(url: str, subscription: str, consumers: int) -> bool:
    """Whether every current shard's leader reports `consumers` consumers (its runtime figures,
    stored with each checkpoint write)."""
    row = (
        probe(url)
        .execute(
            "SELECT count(*) > 0 AND bool_and((l.runtime ->> 'consumers')::int = %s)"
            " FROM outbox.subscriptions AS s JOIN outbox.subscription_leaders AS l"
            "   ON l.subscription_id = s.subscription_id AND l.shard_count = s.shard_count"
            " WHERE s.subscription_id = %s AND l.expires_at > clock_timestamp()",
            (consumers, subscription),
        )
        .fetchone()
    )
    return bool(row and row[0])


# Changes of the shard count ------------------------------------------------------------------


def draining(url: str, subscription: str) -> bool:
    """Whether a change of the shard count is still draining its old shards."""
    row = (
        probe(url)
        .execute(
            "SELECT draining_shard_count IS NOT NULL FROM outbox.subscriptions"
            " WHERE subscription_id = %s",
            (subscription,),
        )
        .fetchone()
    )
    assert row is not None, f"no subscription {subscription!r}"
    return bool(row[0])


def barrier(url: str, subscription: str) -> Position | None:
    """The barrier of the change of the shard count in progress, if any."""
    row = (
        probe(url)
        .execute(
            "SELECT shard_barrier_transaction_id::text::bigint, shard_barrier_position"
            " FROM outbox.subscriptions WHERE subscription_id = %s",
            (subscription,),
        )
        .fetchone()
    )
    assert row is not None, f"no subscription {subscription!r}"
    return None if row[0] is None else Position(row[0], row[1])


def caught_up(url: str, subscription: str) -> bool:
    """No change draining, and no shard has a message after its checkpoint (the shard view)."""
    row = (
        probe(url)
        .execute(
            "SELECT count(*) > 0 AND bool_and(messages_behind = 0 AND NOT draining)"
            " FROM outbox.subscription_shard_status WHERE subscription_id = %s",
            (subscription,),
        )
        .fetchone()
    )
    return bool(row and row[0])


# Every move of a shard's checkpoint ----------------------------------------------------------

# An AFTER trigger on outbox.subscription_shards: each insert or update leaves one row, stamped
# with the database's clock while the statement ran and that session's application_name (a
# daemon's is the holder id of the lease it writes under), and whether that session's holder
# held the shard's lease at that moment. The daemon's write locks the lease row it is fenced
# by, so the lease seen here is the one the write was checked against.
RECORD_SHARD_CHECKPOINTS = """
CREATE TABLE public.shard_checkpoint_changes (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    subscription_id text NOT NULL,
    shard_count integer NOT NULL,
    shard integer NOT NULL,
    changed_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    application_name text NOT NULL DEFAULT current_setting('application_name'),
    old_transaction_id bigint,
    old_position bigint,
    transaction_id bigint NOT NULL,
    position bigint NOT NULL,
    by_lease_holder boolean NOT NULL
);
CREATE FUNCTION public.record_shard_checkpoint() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    holds boolean := EXISTS (
        SELECT FROM outbox.subscription_leaders AS l
        WHERE l.subscription_id = NEW.subscription_id AND l.shard_count = NEW.shard_count
          AND l.shard = NEW.shard AND l.holder = current_setting('application_name'));
BEGIN
    IF TG_OP = 'UPDATE' THEN
        INSERT INTO public.shard_checkpoint_changes (subscription_id, shard_count, shard,
            old_transaction_id, old_position, transaction_id, position, by_lease_holder)
        VALUES (NEW.subscription_id, NEW.shard_count, NEW.shard,
                OLD.last_processed_transaction_id::text::bigint, OLD.last_processed_position,
                NEW.last_processed_transaction_id::text::bigint, NEW.last_processed_position,
                holds);
    ELSE
        INSERT INTO public.shard_checkpoint_changes (subscription_id, shard_count, shard,
            transaction_id, position, by_lease_holder)
        VALUES (NEW.subscription_id, NEW.shard_count, NEW.shard,
                NEW.last_processed_transaction_id::text::bigint, NEW.last_processed_position,
                holds);
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER record_shard_checkpoint AFTER INSERT OR UPDATE ON outbox.subscription_shards
    FOR EACH ROW EXECUTE FUNCTION public.record_shard_checkpoint();
"""


class ShardCheckpointChange(NamedTuple):
    shard_count: int
    shard: int
    changed_at: Any  # the database's clock_timestamp() during the change
    application_name: str
    old: Position | None  # None: the row was created
    new: Position
    by_lease_holder: bool

    @property
    def by_daemon(self) -> bool:
        return self.application_name.startswith(HOLDER_PREFIX)


def record_shard_checkpoints(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(RECORD_SHARD_CHECKPOINTS)


def shard_checkpoint_changes(url: str, subscription: str) -> list[ShardCheckpointChange]:
    """Every insert and update of the subscription's shard checkpoints, in order."""
    rows = (
        probe(url)
        .execute(
            "SELECT shard_count, shard, changed_at, application_name, old_transaction_id,"
            " old_position, transaction_id, position, by_lease_holder"
            " FROM public.shard_checkpoint_changes WHERE subscription_id = %s ORDER BY id",
            (subscription,),
        )
        .fetchall()
    )
    return [
        ShardCheckpointChange(
            count,
            shard,
            changed_at,
            application,
            None if old_tx is None else Position(old_tx, old_pos),
            Position(tx, pos),
            holder,
        )
        for count, shard, changed_at, application, old_tx, old_pos, tx, pos, holder in rows
    ]


# Every change of hands of a shard's lease ----------------------------------------------------

# An AFTER trigger on outbox.subscription_leaders: a new lease row, or a new token (a term
# begins; renewals, which only extend expires_at, are left out), leaves one row with what the
# lease was before: whose, and until when.
RECORD_SHARD_LEASES = """
CREATE TABLE public.shard_lease_changes (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    subscription_id text NOT NULL,
    shard_count integer NOT NULL,
    shard integer NOT NULL,
    token bigint NOT NULL,
    pid integer NOT NULL,
    since timestamptz NOT NULL,
    old_pid integer,
    old_expires_at timestamptz
);
CREATE FUNCTION public.record_shard_lease() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO public.shard_lease_changes
            (subscription_id, shard_count, shard, token, pid, since)
        VALUES (NEW.subscription_id, NEW.shard_count, NEW.shard, NEW.token, NEW.pid, NEW.since);
    ELSIF NEW.token IS DISTINCT FROM OLD.token THEN
        INSERT INTO public.shard_lease_changes
            (subscription_id, shard_count, shard, token, pid, since, old_pid, old_expires_at)
        VALUES (NEW.subscription_id, NEW.shard_count, NEW.shard, NEW.token, NEW.pid, NEW.since,
                OLD.pid, OLD.expires_at);
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER record_shard_lease AFTER INSERT OR UPDATE ON outbox.subscription_leaders
    FOR EACH ROW EXECUTE FUNCTION public.record_shard_lease();
"""


class ShardLeaseChange(NamedTuple):
    shard_count: int
    shard: int
    token: int
    pid: int
    since: Any
    old_pid: int | None  # None: the first lease of this shard
    old_expires_at: Any


def record_shard_leases(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(RECORD_SHARD_LEASES)


def shard_lease_changes(url: str, subscription: str) -> list[ShardLeaseChange]:
    rows = (
        probe(url)
        .execute(
            "SELECT shard_count, shard, token, pid, since, old_pid, old_expires_at"
            " FROM public.shard_lease_changes WHERE subscription_id = %s ORDER BY id",
            (subscription,),
        )
        .fetchall()
    )
    return [ShardLeaseChange(*row) for row in rows]
