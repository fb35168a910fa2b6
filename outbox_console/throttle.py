"""How fast one address may guess tokens: MAX_FAILURES wrong tokens in WINDOW_SECONDS, then
nothing more is compared from it until the oldest of them is WINDOW_SECONDS old.

Tokens are long enough not to be guessed at any rate (tokens.MIN_SECRET_LENGTH); the throttle
keeps an attacker from trying anyway at the ~450 guesses a second the form answers, and says
so in the action log. The address is the one the request came from, or the one a configured
proxy forwards (serve.py): a header no configured proxy vouches for is not believed, so it
cannot pick a fresh address for every guess.
"""

import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable

MAX_FAILURES = 5
WINDOW_SECONDS = 60.0
# Each address with recent failures costs a few hundred bytes; the oldest are forgotten first.
MAX_ADDRESSES = 10_000


class SignInThrottle:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._failures: OrderedDict[str, deque[float]] = OrderedDict()
        self._lock = threading.Lock()

    def wait_seconds(self, address: str) -> float:
        """How long `address` must wait before a token it offers is compared (0: not at all)."""
        with self._lock:
            failures = self._recent(address)
            if len(failures) < MAX_FAILURES:
                return 0.0
            return max(0.0, failures[0] + WINDOW_SECONDS - self._clock())

    def failed(self, address: str) -> bool:
        """`address` offered a wrong token; whether that was the one that stops it."""
        with self._lock:
            failures = self._recent(address)
            failures.append(self._clock())
            self._failures[address] = failures
            self._failures.move_to_end(address)
            while len(self._failures) > MAX_ADDRESSES:
                self._failures.popitem(last=False)
            return len(failures) == MAX_FAILURES

    def _recent(self, address: str) -> deque[float]:
        failures = self._failures.get(address, deque(maxlen=MAX_FAILURES))
        now = self._clock()
        while failures and failures[0] <= now - WINDOW_SECONDS:
            failures.popleft()
        return failures
