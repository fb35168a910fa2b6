"""A run: the deliveries one consumer slot goes through in order, in one hop to its thread.

The slot's thread (or coroutine) claims deliveries one at a time; the event loop may cut the
run at any moment (a handler overran message_timeout), and then gets back exactly the
deliveries that had not started, to withdraw. The lock makes "started" and "withdrawn"
exclusive: no delivery is both run and handed back.
"""

import threading
import time
from collections.abc import Callable, Sequence

from poller.daemon.delivery.handler_calls import Ending, ending_of
from poller.daemon.handlers import HandlerExited
from poller.handler_requests import DestinationUnavailable, ParkMessage
from poller.printable import error_text, failure_text, safe_repr
from poller.subscription import Deliver, Outcome, OutcomeKind

MayStart = Callable[[Deliver], bool]

_ACKED = OutcomeKind.ACKED
_FAILED = OutcomeKind.FAILED
_UNAVAILABLE = OutcomeKind.UNAVAILABLE


class Run:
    __slots__ = (
        "_cut",
        "_lock",
        "_next",
        "_timeout",
        "broken",
        "commands",
        "current",
        "outcomes",
        "reported",
        "reported_outcomes",
    )

    def __init__(self, commands: list[Deliver], message_timeout: float) -> None:
        self.commands = commands
        self._timeout = message_timeout
        self.broken = False
        """A delivery did not succeed, or ran so long that the machine may have failed it:
        nothing queued behind the run may start before its retry."""
        # message_timeout is per message: a batch call of n has n of them, as in the machine.
        self.outcomes: list[Outcome] = []
        """Outcomes of the started deliveries, in the order they ended (appended on the
        handler's thread: a list append is atomic, so the loop reads it without a lock)."""
        self.reported_outcomes = 0
        self.current: tuple[Sequence[Deliver], float] | None = None
        """What runs now and since when (time.monotonic()); one attribute, so a reader on
        another thread never pairs one delivery with another's start time."""
        self.reported: Sequence[Deliver] | None = None
        """The `current` deliveries whose start the machine has been told of."""
        self._lock = threading.Lock()
        self._next = 0
        self._cut = False

    def claim(self, may_start: MayStart) -> Deliver | None:
        """The next delivery to run, now marked current; None when the run is over or cut
        (`may_start` refusing a delivery cuts the run there)."""
        with self._lock:
            if self._cut or self._next == len(self.commands):
                return None
            command = self.commands[self._next]
            if not may_start(command):
                self._cut = True
                return None
            self._next += 1
        self.current = ((command,), time.monotonic())
        return command

    def claim_all(self, may_start: MayStart) -> list[Deliver]:
        """Every delivery up to the first `may_start` refuses, for one batch call."""
        with self._lock:
            claimed = []
            for command in self.commands[self._next :]:
                if self._cut or not may_start(command):
                    self._cut = True
                    break
                claimed.append(command)
            self._next += len(claimed)
        if claimed:
            self.current = (claimed, time.monotonic())
        return claimed

    def timing(self) -> tuple[float, float]:
        """The call `claim` or `claim_all` just returned (on the thread that claimed it): when
        it was claimed, and when the machine may fail it, its claim plus n x message_timeout
        (the machine times from a later tick, so never earlier than this)."""
        current = self.current
        assert current is not None, "timing() is asked right after a claim"
        return current[1], _deadline(current, self._timeout)

    def ended(self, outcome: Outcome) -> bool:
        """Record the outcome of the delivery `claim` returned last (stamped with the time its
        call returned); False if the run must stop here."""
        self.outcomes.append(outcome)
        # _overran first: it also clears `current`, which a failed delivery left set (the
        # run then showed as running at shutdown while it waited for its turn to end).
        if self._overran(outcome.ended_at) or outcome.kind is not _ACKED:
            self.broken = True
        return not self.broken

    def ended_batch(self, outcomes: list[Outcome]) -> None:
        """Record the outcomes of the deliveries `claim_all` returned."""
        self.outcomes += outcomes
        ended_at = outcomes[0].ended_at if outcomes else None
        if self._overran(ended_at) or any(outcome.kind is not _ACKED for outcome in outcomes):
            self.broken = True

    def _overran(self, ended_at: float | None) -> bool:
        # Timed from the claim, which is no later than the start the machine times from:
        # shorter than the call's timeout here means the machine cannot have failed it.
        current, self.current = self.current, None
        if current is None:
            return False
        ended = time.monotonic() if ended_at is None else ended_at
        return ended >= _deadline(current, self._timeout)

    def crashed(self, error: BaseException) -> list[Outcome]:
        """Not a handler failing (that is an outcome): the code around it raised. The
        deliveries whose handler was called count failed, the rest are handed back."""
        current, self.current = self.current, None
        ended_at = time.monotonic()
        outcomes = self.unreported()
        if current is not None:
            reason = f"the consumer crashed around the handler: {error_text(error)}"
            outcomes += [
                Outcome(command.delivery_id, OutcomeKind.FAILED, reason, ended_at)
                for command in current[0]
            ]
        return outcomes + withdrawn(self.cut())

    def unreported(self) -> list[Outcome]:
        """The outcomes recorded since the last call (on the event loop only): a long run's
        acks reach the machine by the next tick, not only at its end."""
        outcomes = self.outcomes
        end = len(outcomes)
        new = outcomes[self.reported_outcomes : end]
        self.reported_outcomes = end
        return new

    def cut(self) -> list[Deliver]:
        """No delivery starts any more; the ones that had not, which the caller withdraws."""
        with self._lock:
            self._cut = True
            rest = self.commands[self._next :]
            self._next = len(self.commands)
        return rest

    def take_out(self, stale: Callable[[Deliver], bool]) -> list[Deliver]:
        """Remove the deliveries not started yet that `stale` picks (an operator skip finished
        their messages), which the caller withdraws; the run goes on with the others, in
        order."""
        with self._lock:
            taken: list[Deliver] = []
            kept: list[Deliver] = []
            for command in self.commands[self._next :]:
                (taken if stale(command) else kept).append(command)
            if taken:
                self.commands[self._next :] = kept
        return taken


def outcome_of(
    delivery_id: int, error: BaseException | None, ended_at: float, ending: Ending | None = None
) -> Outcome:
    """A handler's return (None) or exception, as the machine takes it (`ending`: the
    `ending_of(error)` the caller has already read); never raises, whatever the exception's
    own methods do. Any exception is one failed attempt: `KeyboardInterrupt` and other
    `BaseException`s too, never the end of the daemon. A failure's text ends with where it
    was raised (the parked row's last_error keeps it)."""
    if ending is None:
        ending = ending_of(error)
    if ending is Ending.DELIVERED or ending is Ending.SKIPPED:
        return Outcome(delivery_id, _ACKED, "", ended_at)
    if ending is Ending.RETRY_REQUESTED:
        return Outcome(delivery_id, _FAILED, "retry requested by the handler", ended_at)
    if isinstance(error, ParkMessage | DestinationUnavailable):
        reason = error.reason if isinstance(error.reason, str) else safe_repr(error.reason)
        kind = OutcomeKind.PARK_REQUESTED if ending is Ending.PARK_REQUESTED else _UNAVAILABLE
        return Outcome(delivery_id, kind, reason, ended_at)
    assert error is not None  # only None is DELIVERED
    if isinstance(error, SystemExit):
        error = HandlerExited(error.code).with_traceback(error.__traceback__)
    elif not isinstance(error, Exception):
        text = f"the handler raised {error_text(error)}"
        return Outcome(delivery_id, _FAILED, failure_text(error, text), ended_at)
    return Outcome(delivery_id, _FAILED, failure_text(error), ended_at)


def _deadline(current: tuple[Sequence[Deliver], float], message_timeout: float) -> float:
    # message_timeout is per message: a batch call of n has n of them, as in the machine.
    return current[1] + message_timeout * len(current[0])


def withdrawn(commands: Sequence[Deliver]) -> list[Outcome]:
    return [Outcome(command.delivery_id, OutcomeKind.WITHDRAWN) for command in commands]
