"""Pinned strategy: per-key order, one delivery per key at a time, and key ownership."""

import collections
import heapq
import zlib

from poller.subscription.tracking import MessageState, Priority, TrackedMessage

_QUEUED = MessageState.QUEUED
_DONE = MessageState.DONE
_DROPPED = MessageState.DROPPED


def owner_of(partition_key: str, consumers: int) -> int:
    """The consumer that owns a key: crc32, stable across processes (unlike hash())."""
    return zlib.crc32(partition_key.encode()) % consumers


class _Key:
    """One key's state; created on its first message, dropped when idle (a plain class with
    slots: one is built per message of a key that went idle, on the hot path).
    """

    __slots__ = ("busy_on", "busy_with", "owner", "queued", "replays", "stream")

    def __init__(self, owner: int) -> None:
        self.owner = owner
        self.stream: collections.deque[TrackedMessage] = collections.deque()
        """Unfinished stream messages of the current epoch in Position order."""
        self.replays: collections.deque[TrackedMessage] = collections.deque()
        self.busy_with: int | None = None
        """The delivery in flight for this key, of any epoch; at most one exists."""
        self.busy_on = 0
        self.queued: Priority | None = None
        """Priority of this key's entry in its owner's ready heap, if it has a valid one."""


class KeyQueues:
    """Which message of each key may go next, and a ready heap of keys per owner.

    A key is ready when nothing of it is in flight and it has a queued replay, or its oldest
    unfinished stream message is queued (a head backing off or parking blocks the key, so
    order holds across retries). Heap entries are checked lazily against `_Key.queued`.
    """

    def __init__(self, consumers: int) -> None:
        self._consumers = consumers
        self._keys: dict[str, _Key] = {}
        self._ready: list[list[tuple[Priority, str]]] = [[] for _ in range(consumers)]

    def add_stream(self, message: TrackedMessage, key: str) -> None:
        self._key(key).stream.append(message)

    def add_replay(self, message: TrackedMessage, key: str, *, ahead: bool = False) -> None:
        """Queue a replay; `ahead` puts a withdrawn one back in front of the key's replays."""
        replays = self._key(key).replays
        if ahead:
            replays.appendleft(message)
        else:
            replays.append(message)

    def occupy(self, key: str, delivery_id: int, consumer: int) -> None:
        state = self._keys[key]
        state.busy_with = delivery_id
        state.busy_on = consumer

    def release(self, key: str, delivery_id: int) -> None:
        state = self._keys[key]
        assert state.busy_with == delivery_id, (key, state.busy_with, delivery_id)
        state.busy_with = None

    def refresh(self, key: str) -> int | None:
        """Re-examine a key after a change; returns its owner if it just became ready."""
        state = self._keys.get(key)
        if state is None:
            return None
        candidate = _candidate(state)
        if candidate is None:
            state.queued = None
            if not state.stream and not state.replays and state.busy_with is None:
                del self._keys[key]
            return None
        if state.queued == candidate.priority:
            return None
        state.queued = candidate.priority
        heapq.heappush(self._ready[state.owner], (candidate.priority, key))
        return state.owner

    def pop_ready(self, consumer: int) -> tuple[TrackedMessage, str] | None:
        """The oldest ready message owned by `consumer`, taken off its key's queue."""
        heap = self._ready[consumer]
        while heap:
            priority, key = heapq.heappop(heap)
            state = self._keys.get(key)
            if state is None or state.owner != consumer or state.queued != priority:
                continue
            state.queued = None
            candidate = _candidate(state)
            assert candidate is not None, key
            assert candidate.priority == priority, key
            if candidate.replayed:
                state.replays.popleft()
            return candidate, key
        return None

    def set_consumers(self, consumers: int) -> list[str]:
        """Recompute every owner; returns all keys, which the caller must refresh.

        A key in flight keeps its delivery (`busy_with`), so its new owner gets nothing of
        it until that delivery is acked, failed or timed out: the drain Pulsar's Key_Shared
        does on a consumer change, released by those events alone.
        """
        self._consumers = consumers
        self._ready = [[] for _ in range(consumers)]
        for key, state in self._keys.items():
            state.owner = owner_of(key, consumers)
            state.queued = None
        return list(self._keys)

    def drop_stream(self) -> list[str]:
        """A seek: forget every stream message; keys stay occupied by deliveries in flight."""
        for state in self._keys.values():
            state.stream.clear()
        return list(self._keys)

    def draining(self) -> frozenset[str]:
        """Keys in flight on a consumer that no longer owns them."""
        return frozenset(
            key
            for key, state in self._keys.items()
            if state.busy_with is not None and state.busy_on != state.owner
        )

    def _key(self, key: str) -> _Key:
        state = self._keys.get(key)
        if state is None:
            state = self._keys[key] = _Key(owner_of(key, self._consumers))
        return state


def _candidate(state: _Key) -> TrackedMessage | None:
    """The message this key may deliver next, if any."""
    if state.busy_with is not None:
        return None
    if state.replays:
        return state.replays[0]
    stream = state.stream
    while stream:
        head = stream[0]
        head_state = head.state
        if head_state is _QUEUED:
            return head
        if head_state is not _DONE and head_state is not _DROPPED:
            return None  # in flight, backing off or parking: the key waits for it
        stream.popleft()
    return None
