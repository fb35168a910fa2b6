"""Consumer capacity and which consumer takes the next message that any consumer may take."""

import bisect

from poller.subscription.settings import Strategy


class ConsumerPool:
    """Per-consumer in-flight counts and the sorted list of live consumers with capacity.

    Consumers are numbered 0..count-1. One removed by a count change keeps its in-flight
    count until those deliveries end, but never gets new work. A consumer has
    `max_in_flight` slots, each holding up to `prefetch` deliveries that it runs in order.
    """

    def __init__(self, strategy: Strategy, count: int, max_in_flight: int, prefetch: int) -> None:
        self._lowest_first = strategy is Strategy.DISPATCH_TO_SINGLE
        self._slots = max_in_flight
        self._max_in_flight = max_in_flight * prefetch
        self._count = count
        self._load: dict[int, int] = {}
        self._held: dict[int, int] = {}
        """Units of overrunning calls beyond their deliveries (see `hold`)."""
        self._available = list(range(count))
        self._last_picked = -1

    @property
    def count(self) -> int:
        return self._count

    @property
    def single_slot(self) -> bool:
        """Whether one consumer with one slot takes everything: it runs it in order."""
        return self._count == 1 and self._slots == 1

    def loads(self) -> dict[int, int]:
        """In-flight deliveries per consumer that has any, removed consumers included."""
        held = self._held
        return {c: load - held.get(c, 0) for c, load in self._load.items()}

    def has_capacity(self, consumer: int) -> bool:
        return consumer < self._count and self._load.get(consumer, 0) < self._max_in_flight

    def busy_only(self, consumer: int) -> bool:
        """Whether no other consumer has anything in flight."""
        return self._load.keys() <= {consumer}

    def room(self, consumer: int) -> int:
        """How many more deliveries a live consumer may take."""
        return self._max_in_flight - self._load.get(consumer, 0)

    def pick(self) -> int | None:
        """The consumer for a message any consumer may take, or None if all are full.

        dispatch-to-single: the lowest-numbered consumer with capacity. round-robin (and
        pinned messages without a key): the next one after the last picked, wrapping.
        """
        if not self._available:
            return None
        if self._lowest_first:
            return self._available[0]
        index = bisect.bisect_right(self._available, self._last_picked)
        consumer = self._available[index if index < len(self._available) else 0]
        self._last_picked = consumer
        return consumer

    def take(self, consumer: int) -> None:
        load = self._load.get(consumer, 0) + 1
        self._load[consumer] = load
        if load == self._max_in_flight:
            del self._available[bisect.bisect_left(self._available, consumer)]

    def hold(self, consumer: int, units: int) -> None:
        """A handler call overran: it fills its slot until it returns, whatever it holds."""
        before = self._load[consumer]
        self._load[consumer] = before + units
        self._held[consumer] = self._held.get(consumer, 0) + units
        if before < self._max_in_flight <= before + units and consumer < self._count:
            del self._available[bisect.bisect_left(self._available, consumer)]

    def release(self, consumer: int, held: int = 0) -> bool:
        """Count one delivery ended (with the units `hold` added for it); True if a live
        consumer just got room for another."""
        before = self._load[consumer]
        load = before - 1 - held
        if load:
            self._load[consumer] = load
        else:
            del self._load[consumer]
        if held:
            if left := self._held[consumer] - held:
                self._held[consumer] = left
            else:
                del self._held[consumer]
        if load < self._max_in_flight <= before and consumer < self._count:
            bisect.insort(self._available, consumer)
            return True
        return False

    def set_count(self, count: int) -> None:
        self._count = count
        self._available = [c for c in range(count) if self.has_capacity(c)]
