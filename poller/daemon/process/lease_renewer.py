"""The renewer of a process's leases of one subscription: every `renew_every`, one statement
renews every lease the process holds of it and its membership of the subscription's group
(poller/store/lease_renewal.py), on a thread and a connection of its own.

Why its own thread: a CPU-bound `def` handler holds the GIL most of the time, and the event
loop, which runs every statement of the process's terms, got it back rarely (py-spy --gil, a
5 ms busy handler: 87% of the samples for the handler threads, 9% for the loop). Each
statement's answer waited for the loop's turns behind its other work, and 64 shards' renewals,
a statement each on the loop, came so late that leases lapsed by the thousand. This thread
does nothing else: a renewal costs it a few turns at the GIL (sending, the answer), so a busy
loop cannot hold it up, and one statement renews 64 leases as cheaply as one. It extends each
term's self-fence itself (lease_watch.py), so handlers go on starting however late the loop is
to hear of it. Still a Python thread: it waits its turn at the GIL like any other, which
bench/lease_bench.py measures under such a handler, with and without a loaded machine.

A term asks for a renewal at once (`LeaseWatch.renewed`: a write refused, a term starting);
the asks that meet are answered by one statement. A renewal not answered within the lease's
time (a database that stopped answering) is given up and tried again on a new connection, and
the terms whose lease has run out meanwhile end. The coordinator takes the group from the
renewals (`membership`), and leaves the group through the renewer (`leave`), whose next
renewals then write no membership.
"""

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol

import psycopg

from poller.daemon.log_context import SUBSCRIPTION
from poller.daemon.options import DaemonOptions
from poller.daemon.term.lease_watch import UNANSWERED, LeaseWatch
from poller.reconnect import Backoff, failure_line
from poller.store.lease_renewal import HeldLease, ProcessRenewal
from poller.store.membership_store import GroupState
from poller.store.records import LeaseState
from poller.waits import Stopped, cancel_until_done, unless_stopped, wait_event

log = logging.getLogger(__name__)

CANCELLING = 1.0
"""Seconds a statement given up on gets to end when cancelled (see cancel_until_done)."""
CLOSING = 2.0
"""Seconds `close` waits for the renewer's thread to end (it is a daemon thread)."""


class RenewalDatabase(Protocol):
    """What the renewer asks of the database, on a connection of its own: opened when first
    needed and again after it was lost, under the reconnect policy; Stopped once the
    renewer's stop is set."""

    async def renew(self, leases: Sequence[HeldLease], *, member: bool) -> ProcessRenewal | None:
        """See poller.store.lease_renewal.renew_process_leases; None: the subscription is
        gone."""

    async def leave(self) -> None: ...

    async def forget_connection(self) -> None:
        """Close the connection (a statement on it was given up): the next one opens anew."""

    async def close(self) -> None: ...


OpenRenewals = Callable[[asyncio.Event], RenewalDatabase]
"""Makes the renewer's database on the renewer's own event loop, given its stop."""


class LeaseRenewer:
    def __init__(self, open_database: OpenRenewals, name: str, options: DaemonOptions) -> None:
        self._open_database = open_database
        self._name = name
        self._every = options.renew_every
        # An attempt unanswered for a whole lease: every lease it named has run out by then.
        self._patience = options.lease_seconds
        # Shared with the process's event loop: the leases held now, whether the process is
        # still a member of the group.
        self._lock = threading.Lock()
        self._held: set[LeaseWatch] = set()
        self._member = True
        # The thread's own event loop, and what is only used on it.
        self._own_loop = asyncio.new_event_loop()
        self._wake = asyncio.Event()
        self._stop = asyncio.Event()
        self._leaving: list[asyncio.Future[None]] = []
        self._failures = Backoff(longest=self._every)
        self._overdue_said = False
        self._thread = threading.Thread(
            target=self._run_thread, name=f"outbox-leases {name}", daemon=True
        )
        # On the process's event loop: the group of each renewal, counted (see membership).
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ended: asyncio.Future[None] | None = None
        self._group: GroupState | None = None
        self._groups = 0
        self._groups_taken = 0
        self._group_news = asyncio.Event()
        # Whether the last renewal was answered (set from the renewer's thread).
        self._answering = True

    # On the process's event loop ----------------------------------------------------------

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._ended = self._loop.create_future()
        self._thread.start()

    @contextlib.contextmanager
    def holding(self, watch: LeaseWatch) -> Iterator[None]:
        """Renew `watch`'s lease while the block runs (the term that holds it)."""
        watch.ask_renewer = self.wake
        with self._lock:
            self._held.add(watch)
        try:
            yield
        finally:
            with self._lock:
                self._held.discard(watch)

    def wake(self) -> None:
        """A renewal now (the asks that meet are answered by one)."""
        self._on_own_loop(self._wake.set)

    async def membership(self, stop: asyncio.Event) -> GroupState | None:
        """The group as the next renewal not taken yet found it (None: the subscription is
        gone); Stopped once `stop` is set."""
        while self._groups == self._groups_taken:
            self._group_news.clear()
            await unless_stopped(self._group_news.wait(), stop)
        self._groups_taken = self._groups
        return self._group

    async def leave(self) -> None:
        """Leave the group: no renewal after this writes the membership. The graceful stop of
        the shards waits behind this, so it waits for the leave only while the database
        answered the last renewal, and for at most `renew_every` (a renewal may be on its way
        to a database that stopped answering): else the membership runs out on its own."""
        assert self._loop is not None, "started first"
        left = self._loop.create_future()
        if self._on_own_loop(self._ask_to_leave, left) and self._answering:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._every):
                    await asyncio.shield(left)

    async def close(self) -> None:
        self._on_own_loop(self._stopping)
        if self._ended is not None:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(CLOSING):
                    await asyncio.shield(self._ended)

    def _answered(
        self,
        sent_at: float,
        answers: list[tuple[LeaseWatch, LeaseState | None]],
        group: GroupState | None,
    ) -> None:
        for watch, state in answers:
            watch.answered(sent_at, state)
        self._group = group
        self._groups += 1
        self._group_news.set()

    def _end(self) -> None:
        if self._ended is not None and not self._ended.done():
            self._ended.set_result(None)

    @staticmethod
    def _unanswered(watches: list[LeaseWatch]) -> None:
        for watch in watches:
            watch.lost(UNANSWERED)

    def _on_own_loop(self, callback: Callable[..., None], *arguments: Any) -> bool:
        try:
            self._own_loop.call_soon_threadsafe(callback, *arguments)
        except RuntimeError:
            return False  # its loop is closed: the renewer has ended
        return True

    # On the renewer's thread --------------------------------------------------------------

    def _tell(self, callback: Callable[..., None], *arguments: Any) -> None:
        """Run `callback` on the process's event loop (not when it is closed: the process
        is gone)."""
        assert self._loop is not None
        with contextlib.suppress(RuntimeError):
            self._loop.call_soon_threadsafe(callback, *arguments)

    def _run_thread(self) -> None:
        try:
            self._own_loop.run_until_complete(self._main())
        except BaseException:
            log.exception("%s: the renewer of its leases failed", self._name)
        finally:
            self._own_loop.close()
            if self._ended is not None:
                self._tell(self._end)

    def _stopping(self) -> None:
        self._stop.set()
        self._wake.set()

    def _ask_to_leave(self, left: "asyncio.Future[None]") -> None:
        self._leaving.append(left)
        self._wake.set()

    async def _main(self) -> None:
        SUBSCRIPTION.set(self._name)
        database = self._open_database(self._stop)
        due = 0.0
        try:
            while not self._stop.is_set():
                if (wait := due - time.monotonic()) > 0:
                    await wait_event(self._wake, wait)
                self._wake.clear()
                if self._stop.is_set():
                    break
                if self._leaving:
                    await self._leave(database)
                try:
                    due = await self._renew(database)
                except Exception:
                    # A bug, not the database: no failure may end the renewals for good.
                    log.exception(
                        "%s: renewing the leases failed; trying again in %g s",
                        self._name,
                        self._every,
                    )
                    due = time.monotonic() + self._every
        finally:
            for left in self._leaving:
                self._tell(left.set_result, None)
            await database.close()

    async def _leave(self, database: RenewalDatabase) -> None:
        with self._lock:
            self._member = False
        leaving, self._leaving = self._leaving, []
        try:
            with contextlib.suppress(psycopg.Error, Stopped, TimeoutError):
                await self._within_patience(database, database.leave())
        finally:
            for left in leaving:
                self._tell(left.set_result, None)

    async def _within_patience(self, database: RenewalDatabase, statement: Any) -> Any:
        """`statement`'s result; TimeoutError when it got no answer within the lease's time
        (or the renewer was stopped meanwhile), after giving it up and the connection too."""
        work = asyncio.ensure_future(statement)
        stopped = asyncio.ensure_future(self._stop.wait())
        try:
            await asyncio.wait(
                {work, stopped}, timeout=self._patience, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            stopped.cancel()
        if not work.done():
            await cancel_until_done(work, within=CANCELLING)
            await database.forget_connection()
            raise TimeoutError
        return work.result()

    async def _renew(self, database: RenewalDatabase) -> float:
        """One renewal of every lease held now; when the next is due."""
        with self._lock:
            watches = list(self._held)
            member = self._member
        held = [
            HeldLease(watch.lease.unit, watch.lease.token or 0, watch.runtime_to_write())
            for watch in watches
        ]
        sent_at = time.monotonic()
        try:
            renewal = await self._within_patience(database, database.renew(held, member=member))
        except TimeoutError:
            if self._stop.is_set():
                return sent_at
            self._answering = False
            now = time.monotonic()
            if not self._overdue_said:
                log.warning(
                    "%s: the database did not answer the renewal of %d leases in %g s;"
                    " trying again on a new connection",
                    self._name,
                    len(held),
                    self._patience,
                )
                self._overdue_said = True
            # Every lease confirmed before this attempt has run out on the server by now.
            ran_out = [watch for watch in watches if watch.fence.ran_out(now)]
            self._tell(self._unanswered, ran_out)
            return now
        except Stopped:
            return sent_at
        except psycopg.Error as error:
            self._answering = False
            now = time.monotonic()
            log.warning(
                "%s: cannot renew %d leases: %s; trying again",
                self._name,
                len(held),
                failure_line(error),
            )
            return now + self._failures.failed(now)
        now = time.monotonic()
        self._answering = True
        self._failures.succeeded(now)
        if self._overdue_said:
            log.info("%s: the leases are renewed again", self._name)
            self._overdue_said = False
        log.debug("%s: renewed %d leases in %.3f s", self._name, len(held), now - sent_at)
        if now - sent_at > self._every:
            log.warning(
                "%s: renewing %d leases took %.2f s (each lasts %g s after it is sent)",
                self._name,
                len(held),
                now - sent_at,
                self._patience,
            )
        answers: list[tuple[LeaseWatch, LeaseState | None]] = []
        for watch, lease in zip(watches, held, strict=True):
            state = None if renewal is None else renewal.leases.get((lease.unit, lease.token))
            if state is not None:
                watch.renewed_on_thread(sent_at, lease.runtime)
            answers.append((watch, state))
        self._tell(self._answered, sent_at, answers, None if renewal is None else renewal.group)
        return sent_at + self._every
