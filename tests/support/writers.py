"""Writing to the outbox while daemons read it: messages up front, or writers in the background
(tests.support.background) that remember what they committed and what they rolled back."""

import dataclasses
import itertools
import random
import threading
import time
from collections.abc import Generator, Sequence
from dataclasses import dataclass, field

import psycopg

import outbox
from outbox_cli.demo.workload import WorkloadShape, run_writers
from tests.support.background import BackgroundLoop


@dataclass
class Written:
    """What writers committed and rolled back, by position; thread-safe."""

    committed: set[int] = field(default_factory=set)
    rolled_back: set[int] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, positions: Sequence[int], *, committed: bool) -> None:
        with self.lock:
            (self.committed if committed else self.rolled_back).update(positions)

    def committed_snapshot(self) -> set[int]:
        with self.lock:
            return set(self.committed)


# Up front -----------------------------------------------------------------------------------


def append_committed(url: str, publication: str, count: int) -> list[int]:
    """`count` messages, each committed in its own transaction, in order."""
    positions = []
    with psycopg.connect(url) as conn:
        for n in range(count):
            with conn.transaction():
                positions.append(outbox.append(conn, publication, "TestEvent", {"n": n}))
    return positions


def write_keyed_messages(url: str, publication: str, count: int, keys: int, seed: int) -> None:
    """`count` committed messages, five per transaction, on `keys` random keys."""
    rng = random.Random(seed)
    with psycopg.connect(url) as conn:
        for start in range(0, count, 5):
            with conn.transaction():
                outbox.append_many(
                    conn,
                    publication,
                    [
                        outbox.NewMessage(
                            "KeyedEvent", {"n": n}, partition_key=f"key-{rng.randrange(keys)}"
                        )
                        for n in range(start, min(start + 5, count))
                    ],
                )


# In the background --------------------------------------------------------------------------


class WorkloadLoop:
    """The demo's out-of-order writers (outbox_cli.demo.workload), round after round with a new
    seed, in a background thread until stopped. Use as a context manager."""

    def __init__(self, url: str, publication: str, shape: WorkloadShape) -> None:
        self.url = url
        self.publication = publication
        self.shape = shape
        self.written = Written()
        self.rounds = 0
        self._loop = BackgroundLoop[None]("workload-loop", self._rounds(), every=0.0)

    def __enter__(self) -> "WorkloadLoop":
        self._loop.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()

    def stop(self) -> Written:
        """Stop after the current round; what every round committed and rolled back."""
        self._loop.stop()
        return self.written

    def _rounds(self) -> Generator[None, None, None]:
        while True:
            self.rounds += 1
            shape = dataclasses.replace(self.shape, seed=self.shape.seed + self.rounds)
            tally = run_writers(self.url, self.publication, shape)
            self.written.add(sorted(tally.committed), committed=True)
            self.written.add(sorted(tally.rolled_back), committed=False)
            yield None


class ContinuousWriter:
    """A thread appending one message per transaction every `interval` seconds until stopped;
    every fifth transaction rolls back. Use as a context manager."""

    def __init__(self, url: str, publication: str, interval: float = 0.005) -> None:
        self.url = url
        self.publication = publication
        self.written = Written()
        self._loop = BackgroundLoop[None]("continuous-writer", self._appends(), every=interval)

    def __enter__(self) -> "ContinuousWriter":
        self._loop.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()

    def stop(self) -> set[int]:
        """Stop, and return every committed position."""
        self._loop.stop()
        return self.written.committed_snapshot()

    def _appends(self) -> Generator[None, None, None]:
        with psycopg.connect(self.url) as conn:
            for n in itertools.count(1):
                rolled_back = n % 5 == 0
                position = 0
                with conn.transaction() as transaction:
                    position = outbox.append(conn, self.publication, "TestEvent", {"n": n})
                    if rolled_back:
                        raise psycopg.Rollback(transaction)
                self.written.add([position], committed=not rolled_back)
                yield None


class KeyedWriter:
    """Threads appending several messages with random keys per transaction, until stopped or
    `cap` messages are written; one transaction in ten rolls back. With `commit_delay`, each
    transaction waits up to that long after its appends before it commits, so commits land
    out of position order (as the demo's writers do). Use as a context manager."""

    def __init__(
        self,
        url: str,
        publication: str,
        *,
        keys: int,
        cap: int,
        interval: float,
        seed: int,
        threads: int = 2,
        commit_delay: float = 0.0,
    ) -> None:
        self.url = url
        self.publication = publication
        self.keys = keys
        self.cap = cap
        self.commit_delay = commit_delay
        self.written = Written()
        self._count = 0
        self._lock = threading.Lock()
        self._loops = [
            BackgroundLoop[None](f"writer-{n}", self._transactions(seed + n), every=interval)
            for n in range(threads)
        ]

    def __enter__(self) -> "KeyedWriter":
        for loop in self._loops:
            loop.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()

    @property
    def count(self) -> int:
        with self._lock:
            return self._count

    @property
    def finished(self) -> bool:
        """Every thread is done: the cap was reached (or a writer failed)."""
        return all(loop.finished for loop in self._loops)

    def stop(self) -> Written:
        for loop in self._loops:
            loop.stop()
        return self.written

    def _reserve(self, wanted: int) -> int:
        with self._lock:
            granted = max(0, min(wanted, self.cap - self._count))
            self._count += granted
            return granted

    def _transactions(self, seed: int) -> Generator[None, None, None]:
        rng = random.Random(seed)
        with psycopg.connect(self.url) as conn:
            while size := self._reserve(rng.randint(2, 8)):
                rolled_back = rng.random() < 0.1
                # Most of a transaction's messages are about one key (an order and its
                # events), so a key in flight usually has its next messages buffered: what
                # makes a consumer change drain keys instead of just moving them.
                main_key = rng.randrange(self.keys)
                messages = [
                    outbox.NewMessage(
                        "KeyedEvent",
                        {"n": rng.random()},
                        partition_key=f"key-{key}",
                    )
                    for key in (
                        main_key if rng.random() < 0.7 else rng.randrange(self.keys)
                        for _ in range(size)
                    )
                ]
                positions: list[int] = []
                with conn.transaction() as transaction:
                    positions = outbox.append_many(conn, self.publication, messages)
                    if self.commit_delay:
                        time.sleep(rng.uniform(0, self.commit_delay))
                    if rolled_back:
                        raise psycopg.Rollback(transaction)
                self.written.add(positions, committed=not rolled_back)
                yield None
