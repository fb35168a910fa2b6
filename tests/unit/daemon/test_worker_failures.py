"""The shard worker's table of errors (worker_failures.py): what each kind of error is said
as, and what follows it; the first row that matches wins."""

import logging

import psycopg
import psycopg.errors
import pytest

from outbox.archive.errors import ArchiveError
from outbox.positions import Position
from outbox.read_servers import ReadServerRefusedError
from poller.daemon.process.worker_failures import Failure, Then, reaction_to
from poller.daemon.term.lease_watch import LeadershipLost
from poller.operations.pollable import NotPollableError
from poller.store.retired_positions import RetiredPositionError
from poller.waits import Stopped


@pytest.mark.parametrize(
    ("error", "then", "level"),
    [
        (Stopped(), Then.STOP, logging.NOTSET),
        (LeadershipLost("taken"), Then.AGAIN, logging.WARNING),
        (
            psycopg.OperationalError("server closed the connection"),
            Then.AFTER_LOSS,
            logging.WARNING,
        ),
        (psycopg.errors.ForeignKeyViolation("gone"), Then.STOP, logging.ERROR),
        (NotPollableError("not pollable"), Then.STOP, logging.ERROR),
        (ReadServerRefusedError("promoted"), Then.AFTER_FAILURE, logging.ERROR),
        (ArchiveError("a file is missing"), Then.AFTER_FAILURE, logging.ERROR),
        (RuntimeError("a bug"), Then.AFTER_FAILURE, logging.ERROR),
    ],
)
def test_each_error_has_its_row(error: Exception, then: Then, level: int) -> None:
    reaction = reaction_to(error)
    assert (reaction.then, reaction.level) == (then, level)
    assert reaction.traceback is (type(error) is RuntimeError)  # only a bug's


def test_a_lost_connection_says_what_the_worker_was_doing() -> None:
    error = psycopg.OperationalError("server closed\nthe connection")
    says = reaction_to(error).says
    assert says(Failure(error, "billing", "billing", True, 0.05)) == (
        "connection lost while leading billing: server closed the connection"
    )
    assert says(Failure(error, "billing shard 2", "billing", False, 0.05)).startswith(
        "connection lost while standing by for billing shard 2:"
    )


def test_a_pause_is_said_in_whole_seconds() -> None:
    error = RuntimeError("a bug")
    said = reaction_to(error).says(Failure(error, "billing", "billing", True, 2.4))
    assert said == "billing: worker failed; starting again in 2 s"


def test_a_retired_position_stops_and_names_the_seek_that_accepts_the_loss() -> None:
    error = RetiredPositionError("orders", Position(7, 3), Position(9, 1))
    reaction = reaction_to(error)
    said = reaction.says(Failure(error, "billing", "billing ledger", True, 0.0))
    assert reaction.then is Then.STOP
    assert "Nothing after 7:3 is delivered" in said
    assert "`outbox seek 'billing ledger' --to 9:1` accepts the loss" in said
