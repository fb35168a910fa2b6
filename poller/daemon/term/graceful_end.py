"""A term's graceful end (its shard moves away, it restarts, or the process stops): stop
reading, hand back what has not started, let the handler calls in flight return, write the
final checkpoint and release the lease, which is kept when calls still run (see
GracefulEnd._wait_for_calls). An abrupt end (the lease or the connection lost) writes nothing
and does not come here."""

import asyncio
import contextlib
import logging
import time

from outbox.positions import readable
from poller.daemon.delivery.consumers import Consumers
from poller.daemon.delivery.handler_caller import payload_message
from poller.daemon.options import DaemonOptions
from poller.daemon.term.term_control import TermControl
from poller.daemon.term.term_writes import TermWrites, WriteCommand
from poller.message import Message
from poller.store.term_store import TermStore
from poller.subscription import SubscriptionMachine

log = logging.getLogger(__name__)


class GracefulEnd:
    def __init__(
        self,
        subscription_id: str,
        term: TermControl,
        store: TermStore,
        machine: SubscriptionMachine,
        consumers: Consumers,
        writes: asyncio.Queue[WriteCommand],
        term_writes: TermWrites,
        options: DaemonOptions,
        shutdown: asyncio.Event,
    ) -> None:
        """`shutdown` says the process stops, which bounds the wait for handler calls."""
        self._subscription_id = subscription_id
        self._term = term
        self._store = store
        self._machine = machine
        self._consumers = consumers
        self._writes = writes
        self._term_writes = term_writes
        self._options = options
        self._shutdown = shutdown
        # Set when the end begins: no delivery is handed to a consumer from then on.
        self.begun = False

    async def finish(
        self, reader: asyncio.Task[None], ticker: asyncio.Task[None], writer: asyncio.Task[None]
    ) -> None:
        """Stop reading, hand back what has not started, let the calls in flight return, write
        the final checkpoint and release the lease (kept when calls still run: see
        _wait_for_calls)."""
        self.begun = True
        reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await reader
        # Only calls already running are waited for: the rest is after the final checkpoint,
        # for the next term, and a slow handler's queue would otherwise hold the stop for a
        # call per message.
        if unstarted := self._consumers.take_out(lambda _: True):
            self._term.report(unstarted)
        returned = await self._wait_for_calls(ticker)
        ticker.cancel()
        writes_done = asyncio.ensure_future(self._writes.join())
        try:
            await asyncio.wait({writes_done, writer}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            writes_done.cancel()  # the writer may have ended first (by raising)
        if writer.done():
            writer.result()
        final = self._machine.final_checkpoint()
        if final is not None:
            await self._term_writes.write_checkpoint(final.position, final.epoch)
        if returned:
            await self._store.release()
        log.info("stopped %s at %s", self._subscription_id, readable(self._machine.checkpoint))

    async def _wait_for_calls(self, ticker: asyncio.Task[None]) -> bool:
        """Wait for the handler calls in flight; False when some still run at the end.

        While the process runs on (its shard moves to another process, or the term restarts
        for new settings or a new shard count) they take as long as they take: this process
        keeps the lease, renewed by the ticker, so no other term starts their keys beside
        them, and only losing the lease (the ticker raises LeadershipLost: this process fences
        itself) ends the wait early. Once the process stops they get --shutdown-timeout; a
        call still running then cannot be stopped, so the lease is not released but left to
        expire, after the process has exited (a successor that takes it over waits out what
        it had left, see self_fence.py)."""
        idle = asyncio.ensure_future(self._consumers.wait_idle())
        shutdown = asyncio.ensure_future(self._shutdown.wait())
        try:
            while not idle.done() and not shutdown.done():
                done, _ = await asyncio.wait(
                    {idle, shutdown, ticker},
                    timeout=self._options.shutdown_timeout,
                    return_when=asyncio.FIRST_COMPLETED,
                )
                if ticker in done:
                    ticker.result()  # it only ends by raising: the lease is lost
                if not done:
                    log.warning(
                        "%s: waiting for handler calls to return before the term ends"
                        " (the lease stays with this process meanwhile): %s",
                        self._subscription_id,
                        ", ".join(map(repr, self._calls_in_flight())),
                    )
            if not idle.done():
                await asyncio.wait(
                    {idle, ticker},
                    timeout=self._options.shutdown_timeout,
                    return_when=asyncio.FIRST_COMPLETED,
                )
                if ticker.done():
                    ticker.result()
        finally:
            idle.cancel()
            shutdown.cancel()
        if idle.done():
            return True
        self._term.watch_runs(time.monotonic())  # what the stuck runs finished before
        log.error(
            "subscription %s: handlers still running after %g s, stopping without them (the"
            " lease is left to expire): %s",
            self._subscription_id,
            self._options.shutdown_timeout,
            ", ".join(map(repr, self._calls_in_flight())) or "none in flight (queued for a thread)",
        )
        return False

    def _calls_in_flight(self) -> list[Message]:
        return [payload_message(c.envelope) for c in self._consumers.delivering()]
