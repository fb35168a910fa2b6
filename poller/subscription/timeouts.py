"""message_timeout: the deadlines of started handler calls, and the calls that overran them.

A handler call that runs past its deadline fails its message at the deadline (the attempt
counts; its retry is scheduled or it is parked), but the call is still running: its delivery
keeps its consumer's slot and, under pinned, its key until the call returns. So a retry never
runs beside the attempt it replaces (on a key, or in the one slot of strict order), and no new
work is handed to a slot that is stuck. A call of n deliveries (a batch) gets n times
message_timeout, and overrunning it holds one slot, whatever n is.
"""

import collections

from poller.subscription.tracking import Delivery, MessageState


class Deadlines:
    """Started deliveries by deadline, each delivery of a call carrying the call's deadline.

    Calls of one size have one timeout, and `now` never goes back, so within a size start
    order is deadline order: each size keeps its own queue, due deliveries at its front, and an
    ended delivery leaves in O(1). One-message handlers use a single queue.
    """

    def __init__(self, message_timeout: float) -> None:
        self._timeout = message_timeout
        self._by_size: dict[int, collections.OrderedDict[int, Delivery]] = {}

    def start(self, call_size: int, started: list[Delivery], now: float) -> None:
        """These deliveries, of one handler call of `call_size`, began at `now`."""
        queue = self._by_size.get(call_size)
        if queue is None:
            queue = self._by_size[call_size] = collections.OrderedDict()
        deadline = now + self._timeout * call_size
        for delivery in started:
            delivery.deadline = deadline
            delivery.call_size = call_size
            queue[delivery.delivery_id] = delivery

    def remove(self, delivery: Delivery) -> None:
        """A started delivery ended (or overran): it has no deadline to watch any more."""
        queue = self._by_size.get(delivery.call_size)
        if queue is not None:
            queue.pop(delivery.delivery_id, None)

    def due(self, now: float) -> list[Delivery]:
        """The deliveries whose deadline is at or before `now`, taken off the queues."""
        due: list[Delivery] = []
        for queue in self._by_size.values():
            while queue:
                delivery = next(iter(queue.values()))
                assert delivery.deadline is not None
                if delivery.deadline > now:
                    break
                del queue[delivery.delivery_id]
                due.append(delivery)
        return due

    def reason(self, delivery: Delivery) -> str:
        if delivery.call_size == 1:
            return f"timed out after {self._timeout}s"
        return (
            f"timed out after {self._timeout * delivery.call_size:g}s"
            f" (a batch of {delivery.call_size}, {self._timeout}s a message)"
        )


class Overruns:
    """Deliveries failed at their deadline whose handler call has not returned yet: they hold
    their consumer (a whole slot, `held` units beyond their own) and key until it does."""

    def __init__(self, prefetch: int) -> None:
        self._prefetch = prefetch
        self._running: dict[int, Delivery] = {}

    def __bool__(self) -> bool:
        return bool(self._running)

    def __contains__(self, delivery_id: int) -> bool:
        return delivery_id in self._running

    def add(self, overran: list[Delivery]) -> list[tuple[int, int]]:
        """Deliveries that overran together, one call or several; returns (consumer, units)
        to hold on top of what the deliveries count, so each call fills one slot."""
        holds: list[tuple[int, int]] = []
        calls: dict[tuple[int, float | None, int], list[Delivery]] = {}
        for delivery in overran:
            self._running[delivery.delivery_id] = delivery
            if delivery.call_size == 1:
                calls[delivery.consumer, None, delivery.delivery_id] = [delivery]
            else:  # a batch's deliveries share consumer and deadline, and overrun together
                key = (delivery.consumer, delivery.deadline, delivery.call_size)
                calls.setdefault(key, []).append(delivery)
        for call in calls.values():
            # A batch call of more deliveries than its size: two calls of one size started
            # at the same moment on one consumer; hold a slot for each.
            slots = -(-len(call) // call[0].call_size)
            held = slots * self._prefetch - len(call)
            if held > 0:
                call[0].held = held
                holds.append((call[0].consumer, held))
        return holds

    def pop(self, delivery_id: int) -> Delivery | None:
        return self._running.pop(delivery_id, None)


def ended_in_time(delivery: Delivery, ended_at: float | None, now: float) -> bool:
    """Whether a call that returned at `ended_at` (None: `now`) beat its deadline."""
    deadline = delivery.deadline
    return deadline is None or (now if ended_at is None else ended_at) < deadline


def stands_after_all(delivery: Delivery, ended_at: float | None) -> bool:
    """Whether the outcome of a call that overran stands: the call returned before its
    deadline, reported after the deadline fired (a tick late, say), and its message has not
    moved on since (delivered again, parked or finished): it still waits for the retry that
    the deadline scheduled."""
    message = delivery.message
    return (
        ended_at is not None
        and ended_in_time(delivery, ended_at, ended_at)
        and message.state is MessageState.BACKOFF
        and message.attempts == delivery.attempt
    )
