"""What a leadership term knows of its lease, kept by the renewer of its process
(poller/daemon/process/lease_renewer.py), which renews every lease the process holds of the
subscription in one statement, on a thread and a connection of its own.

The renewer extends the term's self-fence (self_fence.py) on its own thread, as soon as a
renewal is answered: the handler threads read the fence before each delivery, so the event
loop, whose turns at the GIL a CPU-bound `def` handler makes rare, needs no turn for a lease
to stay usable. What each renewal brings (the subscription as stored now: a seek, settings, a
change of the shard layout, operator requests) reaches the term on the event loop, where it
takes it (`news`) or waits for it (`renewed`).

A renewal that came too late leaves the fence lapsed: nothing starts, but the term goes on.
A later renewal that finds the lease still held with this term's token lets it start again
from where it was: every taking of a lease raises its token, so nobody led the shard
meanwhile, and the term's state is still the truth (ending it would deliver again all it
finished since its last checkpoint). The term ends (`LeadershipLost`) when a renewal finds
the lease taken, or when the renewer heard nothing from the database until the lease had run
out.
"""

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any

from poller.daemon.term.self_fence import SelfFence
from poller.store.records import Lease, LeaseState

TAKEN = "another process holds the lease"
UNANSWERED = "the database did not answer the lease's renewal before it could run out"


class LeadershipLost(Exception):  # noqa: N818 - an event the worker handles, not a bug
    """Another process holds the subscription now; stop without writing anything."""


class LeaseWatch:
    def __init__(self, lease: Lease, fence: SelfFence) -> None:
        """Made on the event loop, right after `lease` was taken (its token is this term's)."""
        self.lease = Lease(
            lease.subscription_id, lease.holder, lease.ttl_seconds, lease.unit, lease.token
        )
        self.fence = fence
        self._loop = asyncio.get_running_loop()
        # On the event loop: the newest renewal not taken yet, why the term must end, and the
        # asks for a renewal (when asked, and the future its answer resolves).
        self._news: LeaseState | None = None
        self._lost: str | None = None
        self._asks: list[tuple[float, asyncio.Future[LeaseState]]] = []
        self._answered = asyncio.Event()
        # The renewer's (see hold): wakes it for a renewal now.
        self.ask_renewer: Callable[[], None] = _not_held
        # The runtime figures: the newest the term gave or a checkpoint wrote, and those the
        # next renewal writes (None: the stored ones are the newest, as far as it knows). The
        # renewer's thread takes them.
        self._runtime_lock = threading.Lock()
        self._runtime_newest: dict[str, Any] | None = None
        self._runtime: dict[str, Any] | None = None

    # The term's side, on the event loop ---------------------------------------------------

    def news(self) -> LeaseState | None:
        """The newest renewal's answer not taken yet (None when there is none); raises
        LeadershipLost once the lease is known lost."""
        if self._lost is not None:
            raise LeadershipLost(self._lost)
        news, self._news = self._news, None
        return news

    async def renewed(self) -> LeaseState:
        """The answer of a renewal sent from now on (asked for at once); LeadershipLost when
        it finds the lease taken, or nothing is heard until the lease could run out."""
        if self._lost is not None:
            raise LeadershipLost(self._lost)
        answer: asyncio.Future[LeaseState] = self._loop.create_future()
        self._asks.append((time.monotonic(), answer))
        self.ask_renewer()
        return await answer

    async def confirmed(self) -> None:
        """Return once the lease is confirmed for starting deliveries: at once while it is.
        After a renewal came too late, once a later one finds the lease still this term's; a
        lease known lost never is (the term ends, which cancels this wait)."""
        while self._lost is not None or self.fence.lapsed(time.monotonic()):
            self._answered.clear()
            await self._answered.wait()

    def give_runtime(self, runtime: dict[str, Any]) -> None:
        """The term's runtime figures now (fenced by the token as it is): the next renewal
        writes them when they differ from the newest given or written."""
        with self._runtime_lock:
            if runtime != self._runtime_newest:
                self._runtime_newest = self._runtime = runtime

    def runtime_written(self, runtime: dict[str, Any]) -> None:
        """A checkpoint's statement wrote `runtime`: the newest, which no renewal need write
        again."""
        with self._runtime_lock:
            self._runtime_newest = runtime
            self._runtime = None

    # The renewer's side -------------------------------------------------------------------

    def runtime_to_write(self) -> dict[str, Any] | None:
        """On the renewer's thread: the figures the next renewal writes."""
        with self._runtime_lock:
            return self._runtime

    def renewed_on_thread(self, sent_at: float, runtime: dict[str, Any] | None) -> None:
        """On the renewer's thread: a renewal sent at `sent_at` found the lease still held and
        extended it (and wrote `runtime`): deliveries may start until it could run out."""
        self.fence.renewed(sent_at)
        if runtime is None:
            return
        with self._runtime_lock:
            if self._runtime is runtime:
                self._runtime = None  # written; figures given since wait for the next one
            elif self._runtime is None and runtime != self._runtime_newest:
                # A checkpoint wrote newer figures on another connection meanwhile, and which
                # statement committed last is unknown: older figures must not stay stored (a
                # destination said unavailable long after it was back), so write them again.
                self._runtime = self._runtime_newest

    def answered(self, sent_at: float, state: LeaseState | None) -> None:
        """On the event loop: what a renewal sent at `sent_at` found (None: the lease is
        taken, or the subscription gone)."""
        if state is None:
            self.lost(TAKEN)
            return
        self._news = state
        asks = []
        for asked_at, answer in self._asks:
            if asked_at > sent_at:
                asks.append((asked_at, answer))
            elif not answer.done():
                answer.set_result(state)
        self._asks = asks
        self._answered.set()

    def lost(self, why: str) -> None:
        """On the event loop: the lease is lost (TAKEN) or nothing was heard (UNANSWERED)."""
        if self._lost is None:
            self._lost = why
        for _, answer in self._asks:
            if not answer.done():
                answer.set_exception(LeadershipLost(self._lost))
        self._asks = []
        self._answered.set()


def _not_held() -> None:
    """A watch not held by a renewer yet has nobody to ask (a term runs only once held)."""
