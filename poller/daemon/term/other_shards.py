"""What a shard's reader does with the rest of the publication, which its read passes over:
every read brings the publication's last message safe to read then (of any shard)."""

import time

from outbox.positions import Position
from poller.daemon.term.notify_listener import NotifyListener
from poller.subscription import Command, SubscriptionMachine


class OtherShards:
    def __init__(self, notifications: NotifyListener, publication: str) -> None:
        self._notifications = notifications
        self._publication = publication
        self._last_safe_seen: Position | None = None

    def after_read(
        self, last_safe: Position | None, machine: SubscriptionMachine, *, short: bool
    ) -> list[Command]:
        """Wake this process's other readers of the publication when new messages became
        safe to read (their own new messages are likely among them: a shard sees 1/N of the
        messages, so left to its own poll interval it backs off N times as often as one
        reader of them all). After a short read the shard has nothing of its own up to
        `last_safe`: with nothing unfinished its checkpoint moves there, so a shard whose keys
        are quiet does not hold the floor (and with it retention) back. On a hot standby that
        read proved its server still a standby in its own statement (read_server_proven): a
        promoted copy's frontier passes transactions still open on the primary, and a move
        to its `last_safe` would pass their messages for good."""
        if last_safe is None:
            return []  # a plain subscription's read: it reads every message itself
        if self._last_safe_seen is None or last_safe > self._last_safe_seen:
            self._last_safe_seen = last_safe
            self._notifications.wake(self._publication)
        if (
            short
            and last_safe > machine.checkpoint
            and machine.checkpoint == machine.next_read_position
        ):
            return machine.admin_skip_to(last_safe, time.monotonic())
        return []
