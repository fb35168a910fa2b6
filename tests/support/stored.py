"""What the database holds: the committed messages, a subscription's row and lease, its parked
messages, and (once a test asks for it) every change ever made to its row.

Read through the test's probe connection (tests.support.databases.probe): these are polled.
"""

from typing import Any, NamedTuple

import psycopg

from outbox.positions import Position
from poller import operations
from tests.support.databases import probe

# The application_name of every daemon session (the lease holder id starts with it).
HOLDER_PREFIX = "outbox-poller:"


# Messages -----------------------------------------------------------------------------------


class Committed(NamedTuple):
    at: Position
    key: str | None


def committed_messages(url: str, publication: str) -> list[Committed]:
    """Every message of the publication (committed ones: rolled-back rows are gone), in the
    order a single consumer must see them."""
    rows = (
        probe(url)
        .execute(
            "SELECT transaction_id::text::bigint, position, partition_key FROM outbox.messages"
            " WHERE publication_id = %s ORDER BY transaction_id, position",
            (publication,),
        )
        .fetchall()
    )
    return [Committed(Position(tx, pos), key) for tx, pos, key in rows]


def delivery_order(url: str, publication: str) -> list[Position]:
    """The positions of `committed_messages`, in order."""
    return [message.at for message in committed_messages(url, publication)]


# The subscription ---------------------------------------------------------------------------


class Leader(NamedTuple):
    token: int
    holder: str
    pid: int
    since: Any
    expires_at: Any


def create_subscription(url: str, name: str, publication: str, **settings: Any) -> None:
    """A subscription from the start of the publication (what `outbox subscription create
    NAME --publication P --from start --setting ...` does, without a process start)."""
    with psycopg.connect(url) as conn:
        operations.create(conn, name, publication, "start", settings)


def stored_checkpoint(url: str, subscription: str) -> Position:
    row = (
        probe(url)
        .execute(
            "SELECT last_processed_transaction_id::text::bigint, last_processed_position"
            " FROM outbox.subscriptions WHERE subscription_id = %s",
            (subscription,),
        )
        .fetchone()
    )
    assert row is not None, f"no subscription {subscription!r}"
    return Position(row[0], row[1])


def epoch_of(url: str, subscription: str) -> int:
    row = (
        probe(url)
        .execute(
            "SELECT epoch FROM outbox.subscriptions WHERE subscription_id = %s", (subscription,)
        )
        .fetchone()
    )
    assert row is not None, f"no subscription {subscription!r}"
    return int(row[0])


def current_leader(url: str, subscription: str) -> Leader | None:
    row = (
        probe(url)
        .execute(
            "SELECT token, holder, pid, since, expires_at FROM outbox.subscription_leaders"
            " WHERE subscription_id = %s",
            (subscription,),
        )
        .fetchone()
    )
    return None if row is None else Leader(*row)


def parked_times(url: str, subscription: str) -> dict[int, float]:
    """Parked position -> when it was (last) parked, as time.time()."""
    rows = (
        probe(url)
        .execute(
            "SELECT position, extract(epoch FROM parked_at)::float8"
            " FROM outbox.parked_messages WHERE subscription_id = %s",
            (subscription,),
        )
        .fetchall()
    )
    return {position: at for position, at in rows}


# Every change of the subscription row -------------------------------------------------------

# A test table and an AFTER UPDATE trigger: each change of a subscription row (a seek, a
# settings update, a daemon's checkpoint write) leaves one row, stamped with the database's
# clock_timestamp() while the changing statement ran and that session's application_name.
# A sampler can miss a change between two samples; this cannot.
RECORD_CHANGES = """
CREATE TABLE public.subscription_changes (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    subscription_id text NOT NULL,
    changed_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    application_name text NOT NULL DEFAULT current_setting('application_name'),
    old_epoch bigint NOT NULL,
    epoch bigint NOT NULL,
    transaction_id bigint NOT NULL,
    position bigint NOT NULL
);
CREATE FUNCTION public.record_subscription_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO public.subscription_changes
        (subscription_id, old_epoch, epoch, transaction_id, position)
    VALUES (NEW.subscription_id, OLD.epoch, NEW.epoch,
            NEW.last_processed_transaction_id::text::bigint, NEW.last_processed_position);
    RETURN NULL;
END
$$;
CREATE TRIGGER record_subscription_change AFTER UPDATE ON outbox.subscriptions
    FOR EACH ROW EXECUTE FUNCTION public.record_subscription_change();
"""


class SubscriptionChange(NamedTuple):
    changed_at: Any  # the database's clock_timestamp() during the change
    application_name: str
    old_epoch: int
    epoch: int
    checkpoint: Position

    @property
    def by_daemon(self) -> bool:
        return self.application_name.startswith(HOLDER_PREFIX)


def record_subscription_changes(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(RECORD_CHANGES)


def subscription_changes(url: str, subscription: str) -> list[SubscriptionChange]:
    """Every change recorded since record_subscription_changes, in order."""
    rows = (
        probe(url)
        .execute(
            "SELECT changed_at, application_name, old_epoch, epoch, transaction_id, position"
            " FROM public.subscription_changes WHERE subscription_id = %s ORDER BY id",
            (subscription,),
        )
        .fetchall()
    )
    return [
        SubscriptionChange(at, application, old_epoch, epoch, Position(tx, pos))
        for at, application, old_epoch, epoch, tx, pos in rows
    ]
