"""When to write the checkpoint: batched by count and time, one write outstanding at a time."""

from outbox.positions import Position
from poller.subscription.commands import WriteCheckpoint
from poller.subscription.settings import SubscriptionSettings


class CheckpointBatcher:
    """Decides when a moved checkpoint is worth a database write.

    Each write is an UPDATE on the subscription row; doing one per message would cost more
    than the messages. As KurrentDB does, write after checkpoint_after seconds once
    min_checkpoint_count messages finished, or at once after max_checkpoint_count. And when
    no message has finished for checkpoint_after seconds (the subscription is idle), write
    whatever moved: with fewer than min_checkpoint_count finished it was otherwise never
    written while the daemon ran (status said "behind 3" forever, a crash redelivered
    them). Only one
    write is outstanding: a later one waits for checkpoint_written, so writes cannot land out
    of order; seek and shutdown force one regardless (the daemon applies writes in order).
    A write and its confirmation carry the epoch it was requested in: the store refuses one
    a seek superseded, and a late confirmation of one is ignored here.
    """

    def __init__(self, settings: SubscriptionSettings, start: Position, now: float) -> None:
        self._settings = settings
        self._written = start
        self._requested = start
        self._outstanding: tuple[Position, int] | None = None
        self._finished = 0
        self._last_request_at = now
        self._last_finished_at = now

    @property
    def written(self) -> Position:
        """The last checkpoint the daemon confirmed as stored."""
        return self._written

    def count_finished(self, now: float) -> None:
        self._finished += 1
        self._last_finished_at = now

    def due(self, checkpoint: Position, epoch: int, now: float) -> WriteCheckpoint | None:
        if self._outstanding is not None or checkpoint == self._requested:
            return None
        settings = self._settings
        if (
            self._finished >= settings.max_checkpoint_count
            or (
                self._finished >= settings.min_checkpoint_count
                and now - self._last_request_at >= settings.checkpoint_after
            )
            or now - self._last_finished_at >= settings.checkpoint_after
        ):
            return self._request(checkpoint, epoch, now)
        return None

    def force(self, checkpoint: Position, epoch: int, now: float) -> WriteCheckpoint | None:
        """A write now, unless this checkpoint is already written or being written."""
        if checkpoint == self._requested:
            return None
        return self._request(checkpoint, epoch, now)

    def restart(self, to: Position, epoch: int, now: float) -> WriteCheckpoint:
        """A seek: the count starts over and `to` is written at once in the new epoch.

        Always written, even if `to` was requested before: that request's epoch is over, so
        its confirmation would be ignored and no write would ever be outstanding again.
        """
        self._finished = 0
        return self._request(to, epoch, now)

    def confirm(self, position: Position, epoch: int) -> None:
        """Record a stored write; a confirmation of a write a seek superseded is ignored."""
        if (position, epoch) == self._outstanding:
            self._outstanding = None
            self._written = position

    def _request(self, checkpoint: Position, epoch: int, now: float) -> WriteCheckpoint:
        self._outstanding = (checkpoint, epoch)
        self._requested = checkpoint
        self._finished = 0
        self._last_request_at = now
        return WriteCheckpoint(checkpoint, epoch)
