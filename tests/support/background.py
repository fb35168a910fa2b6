"""One way to run work beside a test: a generator stepped on a thread, every `every` seconds.

Samplers (the stored checkpoint, subscription_status) and writers (tests.support.writers) are
all the same loop: set something up (a connection), do one step, wait, repeat until the test
says stop; keep what the steps produced; and make a failure on the thread fail the test.
The work is a generator: its `with` blocks hold what the thread needs, each `yield` ends one
step (yield a sample to keep it, or None), and returning ends the work early.
"""

import threading
from collections.abc import Generator
from contextlib import closing
from typing import Generic, TypeVar

T = TypeVar("T")
_DONE = object()


class BackgroundLoop(Generic[T]):
    """Steps `work` on a thread, waiting `every` seconds between steps, until `stop()` or the
    generator returns; every item it yields that is not None is appended to `samples`.

    `stop()` ends the generator on its own thread (its `with` blocks close), joins the thread
    and re-raises what the thread raised. Use as a context manager.
    """

    def __init__(self, name: str, work: Generator[T | None, None, None], every: float) -> None:
        self.name = name
        self.every = every
        self.samples: list[T] = []
        self.error: BaseException | None = None
        self._work = work
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def __enter__(self) -> "BackgroundLoop[T]":
        self.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()

    def start(self) -> None:
        self._thread.start()

    @property
    def finished(self) -> bool:
        """The work returned, failed or was stopped (or never started)."""
        return not self._thread.is_alive()

    def latest(self) -> T | None:
        return self.samples[-1] if self.samples else None

    def stop(self, timeout: float = 60) -> list[T]:
        """Stop after the current step; every sample. Raises if the work failed."""
        self._stop.set()
        if self._thread.ident is not None:
            self._thread.join(timeout)
            assert not self._thread.is_alive(), f"{self.name} did not stop within {timeout} s"
        if self.error is not None:
            raise AssertionError(f"{self.name} failed: {self.error!r}") from self.error
        return self.samples

    def _run(self) -> None:
        try:
            with closing(self._work) as work:
                while not self._stop.is_set():
                    sample = next(work, _DONE)
                    if sample is _DONE:
                        return
                    if sample is not None:
                        self.samples.append(sample)  # type: ignore[arg-type]
                    self._stop.wait(self.every)
        except BaseException as error:  # re-raised by stop()
            self.error = error
