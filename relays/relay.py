"""The relay: a batch handler that publishes each batch to one target.

It is a plain batch handler of the daemon (`poller.batch_handler`), so it runs under the
subscription's settings: strategy, consumers, retries, parking, per-key order. What it adds is
the meaning of a broker's answers:
- confirmed: the messages are finished;
- refused for good (the target says which): those messages are parked, with the reason;
- unavailable (down, timing out, a missing stream): `DestinationUnavailable`, so the whole
  batch is delivered again after the retry backoff without counting an attempt. The
  checkpoint never passes an unconfirmed message and an outage parks nothing.
"""

import asyncio
import logging
import time

from poller import BatchOutcomes, Message, batch_handler
from poller.outcomes import DestinationUnavailable, ParkMessage
from relays.relay_metrics import RelayMetrics
from relays.target import BrokerUnavailable, Target

log = logging.getLogger(__name__)

DEFAULT_BATCH_SIZE = 500
"""Messages per publish: one read's worth (the subscription's read_batch_size default)."""


class Relay:
    def __init__(self, target: Target) -> None:
        self.target = target
        self.metrics = RelayMetrics(target.name)
        self.problem: str | None = None
        """Why the last publish failed, while the broker cannot take messages; else None."""
        # One publish at a time per connection: consumers of one subscription share the
        # target, and its lazy (re)connect is not made for concurrent callers.
        self._lock = asyncio.Lock()
        batch_handler(max_batch_size=DEFAULT_BATCH_SIZE)(self)

    async def __call__(self, messages: list[Message]) -> BatchOutcomes:
        async with self._lock:
            started = time.perf_counter()
            try:
                refused = await self.target.publish(messages)
            except BrokerUnavailable as error:
                self._failing(error)
                raise DestinationUnavailable(f"{self.target.name}: {error.reason}") from None
            self.metrics.published(len(messages), len(refused), time.perf_counter() - started)
            if self.problem is not None:
                log.warning("relay to %s: publishing again", self.target.name)
                self.problem = None
        return {
            at: ParkMessage(f"{self.target.name} refused it: {reason}")
            for at, reason in refused.items()
        }

    def _failing(self, error: BrokerUnavailable) -> None:
        self.metrics.broker_error(error.kind)
        if error.reason != self.problem:  # once per new problem, not once per retry
            log.error(
                "relay to %s: the broker cannot take messages (%s): %s;"
                " retrying with backoff, nothing is parked for it",
                self.target.name,
                error.kind,
                error.reason,
            )
        self.problem = error.reason

    async def close(self) -> None:
        await self.target.close()
