"""What operators do to subscriptions themselves: create, read, list, update and delete them,
one short transaction each (the rules here; the SQL in the store)."""

import shlex
from dataclasses import dataclass
from typing import Any

import psycopg

from outbox.messages import check_name
from outbox.positions import Position, readable
from outbox.shards import MAX_SHARDS
from poller.membership import Layout
from poller.operations.places import resolve_start
from poller.operations.refusals import NotFoundError, RefusedValueError, SubscriptionError, quoted
from poller.operations.retired_mark import as_typed, not_retired
from poller.store.admin_store import AdminStore
from poller.store.records import SubscriptionRecord, settings_from_stored
from poller.subscription import SubscriptionSettings


@dataclass(frozen=True)
class Subscription:
    """A subscription as operators read it (`subscription show`, `list`, the console): made
    from the store's record here, so front ends depend on the façade alone."""

    subscription_id: str
    publication: str
    checkpoint: Position
    epoch: int
    stored_settings: dict[str, Any]
    """The settings as stored: those given, the others take their defaults."""
    replay_requests: int
    layout: Layout
    kind: str | None
    """None for a subscription `outbox poll` delivers; "spark" for a Spark query's progress."""

    @classmethod
    def of(cls, record: SubscriptionRecord) -> "Subscription":
        return cls(
            record.subscription_id,
            record.publication,
            record.checkpoint,
            record.epoch,
            record.stored_settings,
            record.replay_requests,
            record.layout,
            record.kind,
        )

    @property
    def settings(self) -> SubscriptionSettings:
        """Every setting, the defaults included (read when asked for, as the daemon does)."""
        return settings_from_stored(self.stored_settings)


def check_shard_count(shards: int) -> None:
    if not 1 <= shards <= MAX_SHARDS:
        raise RefusedValueError(f"--shards {shards} is not a shard count from 1 to {MAX_SHARDS}")


def create(
    conn: psycopg.Connection[Any],
    name: str,
    publication: str,
    start: str,
    settings: dict[str, Any],
    shards: int = 1,
) -> Position:
    """A subscription of `shards` shards (one: plain, its checkpoint in its own row alone),
    every shard starting after the same checkpoint."""
    check_name("subscription", name)
    check_name("publication", publication)
    check_shard_count(shards)
    settings_from_stored(settings)  # refuse bad settings before storing them
    with conn.transaction():  # the mark's check and the insert, under one lock (not_retired)
        at = not_retired(conn, publication, resolve_start(conn, start), as_typed("--from", start))
        store = AdminStore(conn)
        if not store.insert_subscription(name, publication, at, settings, shards):
            raise SubscriptionError(f"subscription {quoted(name)} already exists")
        if shards > 1:
            store.insert_shards(name, shards, at)
    return at


def _missing(name: str) -> NotFoundError:
    return NotFoundError(f"subscription {quoted(name)} does not exist")


def checked_lookup(name: str) -> str:
    """PostgreSQL text cannot hold NUL, so no stored name has one; the query would fail."""
    if "\x00" in name:
        raise _missing(name)
    return name


def get(conn: psycopg.Connection[Any], name: str) -> Subscription:
    record = AdminStore(conn).subscription(checked_lookup(name))
    if record is None:
        raise _missing(name)
    return Subscription.of(record)


def list_all(conn: psycopg.Connection[Any]) -> list[Subscription]:
    return [Subscription.of(record) for record in AdminStore(conn).subscriptions()]


def locked(conn: psycopg.Connection[Any], name: str) -> Subscription:
    """The subscription, its row locked until the caller's transaction ends: changes of its
    shard layout (a change of the count, a seek, the daemon's end of a drain) queue up."""
    record = AdminStore(conn).lock_subscription(checked_lookup(name))
    if record is None:
        raise _missing(name)
    return Subscription.of(record)


def refuse_while_draining(record: Subscription, refused: str) -> None:
    """While a change of the shard count drains, its layout must hold still: a seek would move
    the old shards back behind the barrier while new ones may already run after it, and a
    second change would need a barrier of its own before this one's has been reached."""
    layout = record.layout
    if layout.draining_shard_count is None or layout.barrier is None:
        return
    name = record.subscription_id
    raise SubscriptionError(
        f"{refused}: a change of {quoted(name)} to {layout.shard_count} shards is still"
        f" draining (its {layout.draining_shard_count} old shards deliver up to"
        f" {readable(layout.barrier)}); see it with `outbox subscription show {shlex.quote(name)}`"
        " and try again once it has ended"
    )


def delete(conn: psycopg.Connection[Any], name: str) -> None:
    if not AdminStore(conn).delete_subscription(checked_lookup(name)):
        raise _missing(name)


def update_settings(conn: psycopg.Connection[Any], name: str, changes: dict[str, Any]) -> None:
    merged = {**get(conn, name).stored_settings, **changes}
    settings_from_stored(merged)
    AdminStore(conn).replace_settings(name, merged)
