"""What a shard's worker (worker.py) does when an error ends its term or its wait for one: one
row per kind of error, the first that matches wins. A row says what is logged, at which level
(with the traceback or not), and what follows: a new attempt at once, one after a pause, or
the end of the worker (the process and its other subscriptions go on)."""

import enum
import logging
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple, cast

import psycopg
import psycopg.errors

from outbox.archive.errors import ArchiveError
from outbox.positions import readable
from outbox.read_servers import ReadServerRefusedError
from poller.daemon.term.lease_watch import LeadershipLost
from poller.operations.pollable import NotPollableError
from poller.reconnect import failure_line
from poller.store.restore_check import RestoredDatabaseError
from poller.store.retired_positions import RetiredPositionError
from poller.waits import Stopped


class Then(enum.Enum):
    AGAIN = "again"
    """Stand by and try to lead again at once."""
    AFTER_LOSS = "after loss"
    """Again after the reconnect policy's backoff: the one wait for a lost connection (the
    shared connections reopen without a wait of their own, see shared_connection.py)."""
    AFTER_FAILURE = "after failure"
    """Again after the failure backoff (2 s doubling to 30 s): what waiting may mend."""
    STOP = "stop"
    """The worker ends."""


class Failure(NamedTuple):
    """What a line about the error may name."""

    error: BaseException
    name: str
    """The shard as the logs name it (the subscription where it has one shard)."""
    subscription_id: str
    leading: bool
    pause: float
    """Seconds until the next attempt."""


@dataclass(frozen=True)
class Reaction:
    then: Then
    level: int = logging.NOTSET
    """NOTSET: nothing is said."""
    says: Callable[[Failure], str] = str
    traceback: bool = False


def _connection_lost(failure: Failure) -> str:
    doing = "leading" if failure.leading else "standing by for"
    return f"connection lost while {doing} {failure.name}: {failure_line(failure.error)}"


def _retired_position(failure: Failure) -> str:
    error = cast(RetiredPositionError, failure.error)
    return (
        f"{failure.name} stops: {error}. Nothing after {readable(error.after)} is delivered"
        f" until an operator decides: `outbox seek {shlex.quote(failure.subscription_id)}"
        f" --to {error.mark}` accepts the loss, then restart `outbox poll`"
    )


Kinds = type[BaseException] | tuple[type[BaseException], ...]

REACTIONS: tuple[tuple[Kinds, Reaction], ...] = (
    # Told to stop while the database was unreachable.
    (Stopped, Reaction(Then.STOP)),
    (
        LeadershipLost,
        Reaction(
            Then.AGAIN,
            logging.WARNING,
            lambda f: f"lost leadership of {f.name} ({f.error}); standing by",
        ),
    ),
    # A statement refused on a connection that stays open (a standby's recovery conflict)
    # waits too, so it is not retried in a loop.
    (psycopg.OperationalError, Reaction(Then.AFTER_LOSS, logging.WARNING, _connection_lost)),
    # Deleted under a running daemon (its lease row went with it).
    (
        psycopg.errors.ForeignKeyViolation,
        Reaction(
            Then.STOP,
            logging.ERROR,
            lambda f: f"{f.subscription_id}: the subscription was deleted; its worker stops",
        ),
    ),
    (
        (NotPollableError, RestoredDatabaseError),
        Reaction(Then.STOP, logging.ERROR, lambda f: f"{f.error}; its worker stops"),
    ),
    # Promoted under a running daemon (a failover, a split brain): nothing is read until the
    # read server is a standby of the primary again, or is the primary.
    (
        ReadServerRefusedError,
        Reaction(
            Then.AFTER_FAILURE,
            logging.ERROR,
            lambda f: (
                f"{f.name}: {f.error}; no message is read from it"
                f" (checking again in {f.pause:.0f} s)"
            ),
        ),
    ),
    # The archive this subscription reads (it starts below the retired-up-to mark) cannot be
    # read now: a file missing or damaged, which a restore from a backup can mend.
    (
        ArchiveError,
        Reaction(
            Then.AFTER_FAILURE,
            logging.ERROR,
            lambda f: (
                f"{f.name}: {f.error}; nothing after it is delivered"
                f" (trying again in {f.pause:.0f} s)"
            ),
        ),
    ),
    # Reading on would skip what retention dropped: stop where an operator sees it rather
    # than deliver around a hole (catch-up subscriptions raise it too).
    (RetiredPositionError, Reaction(Then.STOP, logging.ERROR, _retired_position)),
    # A bug, not the subscription's fault: no single failure may stop delivery for good, so
    # the worker starts over from the stored checkpoint after a pause.
    (
        Exception,
        Reaction(
            Then.AFTER_FAILURE,
            logging.ERROR,
            lambda f: f"{f.subscription_id}: worker failed; starting again in {f.pause:.0f} s",
            traceback=True,
        ),
    ),
)


def reaction_to(error: Exception) -> Reaction:
    return next(reaction for kinds, reaction in REACTIONS if isinstance(error, kinds))
