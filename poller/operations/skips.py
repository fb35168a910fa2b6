"""`outbox skip`: asking a subscription's leader to finish messages without delivering them,
in the same epoch."""

from typing import Any, NamedTuple

import psycopg

from outbox.positions import Position, readable
from poller.operations.places import resolve_start
from poller.operations.refusals import SubscriptionError, quoted
from poller.operations.subscriptions import checked_lookup, get
from poller.store.admin_store import AdminStore


class PendingSkip(NamedTuple):
    """A skip the leader has not finished yet: every message up to `to`, asked in `epoch` (a
    seek voids it)."""

    to: Position
    epoch: int


class SkipRequested(NamedTuple):
    requested: Position
    pending: Position
    """The skip the leader will apply: `requested`, or a further one already pending."""
    leader_alive: bool


def request_skip(conn: psycopg.Connection[Any], name: str, to: str) -> SkipRequested:
    """Ask the leader to finish every message up to `to` without delivering it (again).

    Unlike a seek the epoch stays: nothing after `to` is delivered twice, and the delivery of
    a skipped message already in flight keeps its key until it ends (Pulsar #25627). Without
    a leader the request waits for the next one, which applies it before its first read.
    """
    record = get(conn, name)
    if record.kind is not None:
        raise SubscriptionError(
            f"subscription {quoted(name)} records a {record.kind} query's progress;"
            " only subscriptions `outbox poll` delivers can skip"
        )
    at = resolve_start(conn, to, option="--to")
    store = AdminStore(conn)
    if store.request_skip(name, at) is None:
        pending = store.skip_request(name)
        checkpoint = get(conn, name).checkpoint
        if pending is None or not at > checkpoint:
            raise SubscriptionError(
                f"--to {quoted(to)}: {quoted(name)} is already past it (checkpoint"
                f" {readable(checkpoint)}); nothing to skip"
            )
        return SkipRequested(at, pending.to, store.leader_alive(name))
    return SkipRequested(at, at, store.leader_alive(name))


def skip_request(conn: psycopg.Connection[Any], name: str) -> PendingSkip | None:
    """The skip a leader has not finished yet, if any."""
    pending = AdminStore(conn).skip_request(checked_lookup(name))
    return None if pending is None else PendingSkip(pending.to, pending.epoch)
