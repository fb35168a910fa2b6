"""Strict order: one consumer with one slot takes the stream strictly in Position order."""

import collections
from collections.abc import Iterable

from poller.subscription.consumer_pool import ConsumerPool
from poller.subscription.tracking import MessageState, TrackedMessage

_QUEUED = MessageState.QUEUED
_IN_FLIGHT = MessageState.IN_FLIGHT


def take_in_order(
    unfinished: Iterable[TrackedMessage],
    pool: ConsumerPool,
    fresh: collections.deque[TrackedMessage],
    due_retries: collections.deque[TrackedMessage],
) -> list[TrackedMessage]:
    """The messages consumer 0 takes next, off the queues they wait in (the README's
    promise): a message backing off or parking holds back the later ones, as a pinned key's
    head does. Without this, message 6 was handled before 5's second attempt.

    With prefetch, the slot holds the oldest unfinished messages as one prefix of the
    stream, which its consumer runs in order; a queued message behind an in-flight one (its
    run was cut) waits until that prefix has ended, and nothing goes to a slot held by a call
    that overran its timeout. The walk covers at most the slot's own deliveries and the room
    it has, so it costs O(prefetch), not O(buffer).
    """
    if not pool.has_capacity(0):
        return []
    room = pool.room(0)
    # Deliveries still on consumers removed by a count change end in any order: until they
    # have, nothing is added behind them.
    ahead_in_order = pool.busy_only(0)
    run: list[TrackedMessage] = []
    for message in unfinished:
        state = message.state
        if state is _IN_FLIGHT:
            if run or not ahead_in_order:
                return []
            continue
        if state is not _QUEUED:
            break
        run.append(message)
        if len(run) == room:
            break
    if not run:
        return []
    consumer = pool.pick()  # consumer 0; picked only now, as round-robin remembers it
    assert consumer == 0
    for message in run:
        while fresh and fresh[0].state is not _QUEUED:  # finished or delivered meanwhile
            fresh.popleft()
        if fresh and fresh[0] is message:
            fresh.popleft()
        else:
            # A due or withdrawn retry; several wait only after the consumers shrank to one.
            due_retries.remove(message)
    return run
