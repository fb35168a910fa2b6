"""Messages backing off before their next attempt, by due time."""

import heapq
import itertools

from poller.subscription.tracking import MessageState, TrackedMessage


class RetryTimer:
    """A heap of (due, sequence, message). Entries of messages that left BACKOFF some other
    way (a seek dropped them, an admin skip finished them) are discarded when they surface.
    """

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, TrackedMessage]] = []
        self._sequence = itertools.count()

    def schedule(self, message: TrackedMessage, due: float) -> None:
        message.state = MessageState.BACKOFF
        heapq.heappush(self._heap, (due, next(self._sequence), message))

    def pop_due(self, now: float) -> list[TrackedMessage]:
        """Messages whose delay has passed, earliest first; still in BACKOFF for the caller."""
        heap = self._heap
        due: list[TrackedMessage] = []
        while heap and heap[0][0] <= now:
            message = heapq.heappop(heap)[2]
            if message.state is MessageState.BACKOFF:
                due.append(message)
        return due

    def waiting(self) -> int:
        """How many messages are backing off (observability; O(n))."""
        return sum(1 for _due, _seq, message in self._heap if message.state is MessageState.BACKOFF)
