"""The relay: a batch handler that publishes each batch to one target.

It is a plain batch handler of the daemon (`poller.batch_handler`), so it runs under the
subscription's settings: strategy, consumers, retries, parking, per-key order. What it adds is
the meaning of a broker's answers:
- confirmed: the messages are finished;
- refused for good (the target says which): those messages are parked, with the reason;
- unavailable (down, timing out, a missing stream): `DestinationUnavailable`, so the batch
  (or the messages the broker could not take now, with those after them of their keys) is
  delivered again after the retry backoff without counting an attempt. The checkpoint never
  passes an unconfirmed message and an outage parks nothing.

Every wait, the lock's included, ends before the daemon's deadline for the call
(`poller.call_deadline()`: n x message_timeout): a broker that stops answering is an outage
whatever message_timeout and timeout= are, never a timed-out attempt that counts and parks.
"""

import asyncio
import contextlib
import logging
import time
from collections.abc import Mapping

from outbox.positions import Position
from outbox_relays.relay_metrics import RelayMetrics
from outbox_relays.target import BrokerUnavailable, Target, Unsent
from outbox_relays.tracing import publish_spans
from poller import (
    BatchOutcomes,
    DestinationUnavailable,
    Message,
    ParkMessage,
    batch_handler,
    call_deadline,
)

log = logging.getLogger(__name__)

START_CHECK_SECONDS = 15.0
"""How long the check at start may hold the relay's start (a broker that does not answer)."""

DEADLINE_MARGIN = 0.5
"""Seconds before the daemon's deadline the relay gives up (at most a fifth of the call's
time): room to return the outage before the call counts as timed out."""


class Relay:
    def __init__(self, target: Target) -> None:
        self.target = target
        self.metrics = RelayMetrics(target.name)
        self.problem: str | None = None
        """Why the last publish failed, while the broker cannot take messages; else None."""
        # One publish at a time per connection: consumers of one subscription share the
        # target, and its lazy (re)connect is not made for concurrent callers.
        self._lock = asyncio.Lock()
        self._closing: set[asyncio.Task[None]] = set()
        self._spans = publish_spans(target)
        # Messages per publish: a batch handler's default, one read's worth.
        batch_handler()(self)

    async def __call__(self, messages: list[Message]) -> BatchOutcomes:
        if self._spans is None:
            return await self._publish(messages)
        outgoing, spans = self._spans.started(messages)
        try:
            outcomes = await self._publish(outgoing)
        except BaseException as error:
            self._spans.ended(outgoing, spans, None, str(error) or type(error).__name__)
            raise
        self._spans.ended(outgoing, spans, outcomes)
        return outcomes

    async def _publish(self, messages: list[Message]) -> BatchOutcomes:
        left = _time_left(call_deadline())
        locked = False
        started = time.perf_counter()
        try:
            async with asyncio.timeout(left):
                await self._lock.acquire()
                locked = True
                unsent = await self.target.publish(messages)
        except BrokerUnavailable as error:
            raise self._unavailable(error) from None
        except TimeoutError:
            # The call's deadline came first: drop the connection behind the call (holding
            # the lock, so the next publish waits for a clean one), and say it as an outage.
            waited = "the broker's confirmation" if locked else "a publish before this one"
            if locked:
                self._close_in_background()
                locked = False
            raise self._unavailable(
                BrokerUnavailable(
                    "timeout",
                    f"no answer within the {left:.3g} s the daemon gives this call (the"
                    f" subscription's message_timeout per message) while waiting for {waited}",
                )
            ) from None
        finally:
            if locked:
                self._lock.release()
        return self._outcomes(messages, unsent, time.perf_counter() - started)

    def _outcomes(
        self, messages: list[Message], unsent: Mapping[Position, Unsent], seconds: float
    ) -> BatchOutcomes:
        """The daemon's outcome of each message the target did not publish. A message after
        one of its key that the broker could not take now waits too, even if the broker
        confirmed it: sent again behind that one, its last copy keeps the key's order."""
        outcomes: dict[Position, BaseException] = {}
        held: dict[str, Position] = {}
        first: BrokerUnavailable | None = None
        refused = 0
        for message in messages:
            answer = unsent.get(message.at)
            key = message.partition_key
            if isinstance(answer, str):
                refused += 1
                outcomes[message.at] = ParkMessage(f"{self.target.name} refused it: {answer}")
            elif answer is not None:
                first = first or answer
                outcomes[message.at] = DestinationUnavailable(
                    f"{self.target.name}: {answer.reason}"
                )
                if key is not None:
                    held.setdefault(key, message.at)
            elif key is not None and key in held:
                outcomes[message.at] = DestinationUnavailable(
                    f"{self.target.name}: sent again behind {held[key]} of its key, which the"
                    " broker could not take"
                )
        taken = len(messages) - len(outcomes)
        if taken or refused:
            self.metrics.published(taken + refused, refused, seconds)
        if first is not None:
            self._unavailable(first)
        elif self.problem is not None:
            log.warning("relay to %s: publishing again", self.target.name)
            self.problem = None
        return outcomes

    def _unavailable(self, error: BrokerUnavailable) -> DestinationUnavailable:
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
        return DestinationUnavailable(f"{self.target.name}: {error.reason}")

    def _close_in_background(self) -> None:
        async def close_then_release() -> None:
            try:
                await self.target.close()
            finally:
                self._lock.release()

        task = asyncio.create_task(close_then_release())
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    async def check(self) -> None:
        """At start: connect, and warn where the destination's settings cannot keep the
        promise; a broker not reachable now is checked when the relay first connects."""
        try:
            async with asyncio.timeout(START_CHECK_SECONDS):
                await self.target.check()
        except BrokerUnavailable as error:
            log.warning(
                "relay to %s: cannot check the destination at start (%s); checked when the"
                " relay connects",
                self.target.name,
                error.reason,
            )
        except TimeoutError:
            log.warning(
                "relay to %s: no answer within %g s at start; the destination is checked when"
                " the relay connects",
                self.target.name,
                START_CHECK_SECONDS,
            )
        finally:
            await self.target.close()

    async def close(self) -> None:
        for task in list(self._closing):
            with contextlib.suppress(Exception):
                await task
        await self.target.close()


def _time_left(deadline: float | None) -> float | None:
    """Seconds until the relay must give up on the call ending at `deadline` (None: no
    bound of the daemon's; the target's timeout= still bounds each wait)."""
    if deadline is None:
        return None
    left = deadline - time.monotonic()
    return max(0.0, left - min(DEADLINE_MARGIN, left / 5))
