"""Subscriptions and leases as the store reads and writes them."""

import datetime
import os
import socket
import uuid
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from outbox.positions import Position
from poller.membership import ONLY_SHARD, PLAIN_LAYOUT, Layout, ShardUnit
from poller.message import Message
from poller.subscription import SubscriptionSettings

# Stored with a subscription that something other than the daemon consumes (the Spark
# source keeps its progress in one); not a setting of the state machine.
KIND_KEY = "kind"


def settings_from_stored(stored: dict[str, Any]) -> SubscriptionSettings:
    """Stored JSON (missing settings take their defaults), without the non-setting `kind`."""
    return SubscriptionSettings.from_mapping({k: v for k, v in stored.items() if k != KIND_KEY})


@dataclass(frozen=True)
class SubscriptionRecord:
    subscription_id: str
    publication: str
    checkpoint: Position
    epoch: int
    stored_settings: dict[str, Any]
    replay_requests: int
    layout: Layout = PLAIN_LAYOUT

    @classmethod
    def from_row(cls, row: tuple[Any, ...]) -> "SubscriptionRecord":
        """The subscription's columns, then (where the query reads them) its layout's."""
        name, publication, transaction_id, position, epoch, settings, replays = row[:7]
        layout = layout_from_columns(*row[7:]) if len(row) > 7 else PLAIN_LAYOUT
        return cls(
            name, publication, Position(transaction_id, position), epoch, settings, replays, layout
        )

    @property
    def settings(self) -> SubscriptionSettings:
        return settings_from_stored(self.stored_settings)

    @property
    def kind(self) -> str | None:
        """Who consumes it: None for the daemon, "spark" for a Spark query's progress."""
        kind = self.stored_settings.get(KIND_KEY)
        return None if kind is None else str(kind)


def layout_from_columns(
    shard_count: int,
    draining_shard_count: int | None,
    barrier_transaction_id: int | None,
    barrier_position: int | None,
) -> Layout:
    barrier = None
    if barrier_transaction_id is not None and barrier_position is not None:
        barrier = Position(barrier_transaction_id, barrier_position)
    return Layout(shard_count, draining_shard_count, barrier)


class SkipRequest(NamedTuple):
    """`outbox skip`: finish every message up to `to`, asked in `epoch` (a seek voids it)."""

    to: Position
    epoch: int

    @classmethod
    def from_columns(
        cls, transaction_id: int | None, position: int | None, epoch: int | None
    ) -> "SkipRequest | None":
        if transaction_id is None or position is None or epoch is None:
            return None
        return cls(Position(transaction_id, position), epoch)


class ReplayRequest(NamedTuple):
    """A parked message an operator asked to deliver again: its row is the one whose
    `parked_at` this is (a later park of the same position writes another), and the request
    the one made at `requested_at` (one made later, while the replay runs, outlives it)."""

    message: Message
    parked_at: datetime.datetime
    requested_at: datetime.datetime


@dataclass(frozen=True)
class LeaseState:
    """What a renewal returns: the subscription as stored now."""

    epoch: int
    checkpoint: Position
    settings: dict[str, Any]
    replay_requests: int
    skip_request: SkipRequest | None = None
    layout: Layout = PLAIN_LAYOUT

    @classmethod
    def from_row(cls, row: tuple[Any, ...]) -> "LeaseState":
        epoch, transaction_id, position, settings, replay_requests, *rest = row
        return cls(
            epoch,
            Position(transaction_id, position),
            settings,
            replay_requests,
            SkipRequest.from_columns(*rest[:3]),
            layout_from_columns(*rest[3:]),
        )


def new_holder_id() -> str:
    # application_name is at most 63 bytes; this stays well under.
    return f"outbox-poller:{uuid.uuid4().hex[:16]}"


@dataclass
class Lease:
    """Who asks to lead a shard of a subscription (the one shard of a plain one), and the
    fencing token once it does.

    The holder id doubles as the connection's application_name, so a standby sees at once
    when the leader's session is gone (kill -9, lost connection) instead of waiting for the
    lease to expire. A leader that is merely paused keeps its session; the expiry covers it.
    """

    subscription_id: str
    holder: str
    ttl_seconds: float
    unit: ShardUnit = ONLY_SHARD
    token: int | None = None
    host: str = field(default_factory=socket.gethostname)
    pid: int = field(default_factory=os.getpid)

    def query_parameters(self) -> dict[str, Any]:
        return {
            "subscription": self.subscription_id,
            "holder": self.holder,
            "host": self.host,
            "pid": self.pid,
            "ttl_seconds": self.ttl_seconds,
            "token": self.token,
            "shard_count": self.unit.shard_count,
            "shard": self.unit.shard,
        }
