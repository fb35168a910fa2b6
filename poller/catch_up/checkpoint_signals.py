"""When a subscription yields a Checkpoint: pure decisions, the time passed in.

Live phase only (after CaughtUp), as in the peer's spec: after every `interval` live messages
delivered, and when `timeout` seconds passed since the last delivered message with something
delivered since the last checkpoint. Unlike that spec, never the same checkpoint twice in a
row: a consumer storing it would write for nothing.

The position a checkpoint carries is the last row scanned, not the last row delivered: rows a
filter skips (another message type, another key) still move it, so a subscriber to a rare
message type does not rescan the stream it already skipped after a restart. It is safe because
the scanned rows are the ones the caller has already seen or skipped, in delivery order.

No clock is read here (psycopg_pool's `update_delay(now)` style): every decision takes `now`,
so tests drive the time.
"""

from dataclasses import dataclass, field

from outbox.positions import Position
from poller.catch_up.signals import Checkpoint


@dataclass
class CheckpointSignals:
    interval: int
    timeout: float
    _live: bool = field(default=False, init=False)
    _scanned: Position | None = field(default=None, init=False)
    _last_checkpoint: Position | None = field(default=None, init=False)
    _delivered_since_checkpoint: int = field(default=0, init=False)
    _last_delivery_at: float = field(default=0.0, init=False)

    def __post_init__(self) -> None:
        if self.interval < 1 or not self.timeout > 0:
            raise ValueError(
                f"checkpoint interval={self.interval} must be >= 1 and timeout={self.timeout} > 0"
            )

    def caught_up(self) -> None:
        """The backlog has been read; from now on messages are live."""
        self._live = True

    def scanned(self, at: Position, *, delivered: bool, now: float) -> Checkpoint | None:
        """A row was read at `at`: yielded to the caller if `delivered`, else skipped by the
        filter. Returns the checkpoint to yield right after it, if one is due."""
        self._scanned = at
        if not (self._live and delivered):
            return None
        self._delivered_since_checkpoint += 1
        self._last_delivery_at = now
        if self._delivered_since_checkpoint >= self.interval:
            return self._emit()
        return None

    def idle(self, now: float) -> Checkpoint | None:
        """Nothing more to read for now: the idle checkpoint, if one is due."""
        deadline = self.deadline()
        if deadline is None or now < deadline:
            return None
        return self._emit()

    def deadline(self) -> float | None:
        """When `idle` would yield a checkpoint if nothing is delivered before; None if it
        would not (nothing delivered live since the last checkpoint)."""
        if self._delivered_since_checkpoint == 0:
            return None
        return self._last_delivery_at + self.timeout

    def _emit(self) -> Checkpoint | None:
        self._delivered_since_checkpoint = 0
        at = self._scanned
        # A delivery always moves the scanned position, so this holds; it is the rule that the
        # same checkpoint is never yielded twice in a row, stated where it is enforced.
        if at is None or at == self._last_checkpoint:
            return None
        self._last_checkpoint = at
        return Checkpoint(*at)
