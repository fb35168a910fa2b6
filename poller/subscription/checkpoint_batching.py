"""When to write the checkpoint: batched by count and time, one write outstanding at a time."""

from poller.positions import Position
from poller.subscription.commands import WriteCheckpoint
from poller.subscription.settings import SubscriptionSettings


class CheckpointBatcher:
    """Decides when a moved checkpoint is worth a database write.

    Each write is an UPDATE on the subscription row; doing one per message would cost more
    than the messages. As KurrentDB does, write after checkpoint_after seconds once
    min_checkpoint_count messages finished, or at once after max_checkpoint_count. Only one
    write is outstanding: a later one waits for checkpoint_written, so writes cannot land out
    of order; seek and shutdown force one regardless (the daemon applies writes in order).
    """

    def __init__(self, settings: SubscriptionSettings, start: Position, now: float) -> None:
        self._settings = settings
        self._written = start
        self._requested = start
        self._outstanding: Position | None = None
        self._finished = 0
        self._last_request_at = now

    @property
    def written(self) -> Position:
        """The last checkpoint the daemon confirmed as stored."""
        return self._written

    def count_finished(self) -> None:
        self._finished += 1

    def due(self, checkpoint: Position, now: float) -> WriteCheckpoint | None:
        if self._outstanding is not None or checkpoint == self._requested:
            return None
        settings = self._settings
        if self._finished >= settings.max_checkpoint_count or (
            self._finished >= settings.min_checkpoint_count
            and now - self._last_request_at >= settings.checkpoint_after
        ):
            return self._request(checkpoint, now)
        return None

    def force(self, checkpoint: Position, now: float) -> WriteCheckpoint | None:
        """A write now, unless this checkpoint is already written or being written."""
        if checkpoint == self._requested:
            return None
        return self._request(checkpoint, now)

    def restart(self, to: Position, now: float) -> WriteCheckpoint | None:
        """A seek: the count starts over and the new checkpoint is written at once."""
        self._finished = 0
        return self.force(to, now)

    def confirm(self, position: Position) -> None:
        """Record a stored write; a confirmation of a write a seek superseded is ignored."""
        if position == self._outstanding:
            self._outstanding = None
            self._written = position

    def _request(self, checkpoint: Position, now: float) -> WriteCheckpoint:
        self._outstanding = checkpoint
        self._requested = checkpoint
        self._finished = 0
        self._last_request_at = now
        return WriteCheckpoint(checkpoint)
