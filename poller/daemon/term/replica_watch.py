"""A term's reads from a hot standby, watched after each empty read (at most once a
`renew_every`). A standby that has not replayed up to where the reads continue (a lagging
replica, or a failover to one behind the stored checkpoint) finds nothing there: the read is
empty, the term waits, and nothing moves past rows the standby has not seen. This says so,
once it has lasted `stall_threshold`, again every `stall_repeat` while it lasts, and when it
ends; and it ends the term if it finds the standby promoted. That is not what keeps a promoted
copy's reads out: every read proves its server a standby in its own statement
(outbox.read_servers.ReadProof), as a check between reads comes too late."""

import logging
import time

from outbox.database_url import mask_password
from outbox.positions import Position
from outbox.read_servers import ReplicaLag, behind, check_read_server
from poller.daemon.options import DaemonOptions
from poller.daemon.term.stall import StallWatch
from poller.store.term_store import TermStore

log = logging.getLogger(__name__)


class ReplicaWatch:
    def __init__(
        self, store: TermStore, subscription_id: str, read_url: str, options: DaemonOptions
    ) -> None:
        self._store = store
        self._subscription_id = subscription_id
        self._masked_url = mask_password(read_url)
        self._every = options.renew_every
        self._stall = StallWatch(options.stall_threshold, options.stall_repeat)
        self._next_look = 0.0
        self._warned = False

    async def watch(self, reading_after: Position) -> None:
        """After an empty read from `reading_after`."""
        now = time.monotonic()
        if now < self._next_look:
            return
        self._next_look = now + self._every
        read = await self._store.read_server_state()
        waiting = False
        # The primary is asked only when the standby cannot read on, or is no standby now.
        if not read.in_recovery or read.frontier <= reading_after.transaction_id:
            primary = await self._store.primary_state()
            check_read_server(read, primary, self._masked_url)  # raises: the term ends
            waiting = behind(read, primary, reading_after.transaction_id)
            if self._stall.observe(now, hidden=waiting):
                self._warned = True
                log.warning(
                    "subscription %s: the read server %s has not replayed up to %s (its safe"
                    " frontier is transaction %s, the primary's %s): it is %s; reads wait for"
                    " it, nothing is skipped (waiting %.0f s so far)",
                    self._subscription_id,
                    self._masked_url,
                    reading_after,
                    read.frontier,
                    primary.frontier,
                    ReplicaLag.between(read, primary).describe(),
                    self._stall.waited(now),
                )
        if not waiting:
            self._stall.observe(now, hidden=False)
            if self._warned:
                self._warned = False
                log.info(
                    "subscription %s: the read server %s has replayed past %s; reading on",
                    self._subscription_id,
                    self._masked_url,
                    reading_after,
                )
