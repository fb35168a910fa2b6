"""After an empty read: are committed rows waiting behind the safe frontier, and who holds them
back? The term re-checks soon while rows are hidden (see poll_interval.py), and names the
blockers once they have waited past the stall threshold (see stall.py)."""

import logging
import time

import psycopg

from outbox.positions import Position
from poller.blockers import Blocker
from poller.daemon.options import DaemonOptions
from poller.daemon.term.replica_watch import ReplicaWatch
from poller.daemon.term.stall import StallWatch
from poller.store.term_store import TermStore

log = logging.getLogger(__name__)


class HiddenRows:
    def __init__(
        self, store: TermStore, subscription_id: str, publication: str, options: DaemonOptions
    ) -> None:
        self._store = store
        self._subscription_id = subscription_id
        self._publication = publication
        self._stall = StallWatch(options.stall_threshold, options.stall_repeat)
        read_url = options.read_database_url
        self._replica = (
            None if read_url is None else ReplicaWatch(store, subscription_id, read_url, options)
        )

    async def watch(self, after: Position) -> bool:
        """After an empty read from `after`: are committed rows waiting behind the safe
        frontier (or a hot standby's replay)? Warn if they wait too long."""
        if self._replica is not None:
            await self._replica.watch(after)
        oldest_hidden = await self._store.oldest_hidden_transaction(self._publication, after)
        now = time.monotonic()
        hidden = oldest_hidden is not None
        if self._stall.observe(now, hidden=hidden, oldest=oldest_hidden) and oldest_hidden:
            await self._warn_stalled(oldest_hidden, self._stall.waited(now))
        return oldest_hidden is not None

    async def _warn_stalled(self, oldest_hidden: int, waited: float) -> None:
        try:
            rows = await self._store.blockers_before(oldest_hidden)
        except psycopg.OperationalError:
            raise  # the connection is gone: the term ends as for any lost connection
        except psycopg.Error as error:
            # A diagnosis only: whatever its query meets (a view changed by hand, a
            # privilege missing), delivery must not stop over it.
            rows = []
            log.warning("cannot name the blockers (%s)", error)
        blockers = [Blocker(*row) for row in rows]
        described = "; ".join(b.describe() for b in blockers) or "none found (already ended?)"
        log.warning(
            "subscription %s: committed messages have waited %.1f s behind the safe frontier"
            " (transaction %s and later); held back by: %s",
            self._subscription_id,
            waited,
            oldest_hidden,
            described,
        )
