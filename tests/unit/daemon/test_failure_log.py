"""Handler failures at the default log level: a traceback for each message's first failure,
at most so many a minute per subscription, and then a count of those left out."""

import pytest

from poller.daemon.failure_log import FailureLog, LogBudget
from poller.outcomes import DestinationUnavailable
from tests.unit.daemon.runs_support import deliveries


def test_a_budget_allows_so_many_per_window_then_counts_what_it_left_out() -> None:
    budget = LogBudget(allowed=2, window=60.0)
    assert [budget.take(now) for now in (0.0, 1.0, 2.0, 3.0, 59.9)] == [0, 0, None, None, None]
    assert budget.take(60.0) == 3  # a new window: the next line says three were left out
    assert budget.take(61.0) == 0
    assert budget.take(62.0) is None
    assert budget.take(500.0) == 1


def test_a_poison_storm_writes_a_few_tracebacks_then_says_how_many_it_left_out(
    caplog: pytest.LogCaptureFixture,
) -> None:
    now = [0.0]
    failures = FailureLog("billing", LogBudget(allowed=3, window=60.0), clock=lambda: now[0])
    caplog.set_level("INFO", logger="poller.daemon.failure_log")
    messages = [delivery.envelope.payload for delivery in deliveries(50)]
    for message in messages:
        failures.failed(message, ValueError("poison"), first=True)
    assert len(caplog.records) == 3
    assert all(r.levelname == "WARNING" and r.exc_info for r in caplog.records)
    assert caplog.records[0].getMessage().startswith("subscription billing: handler failed on")
    now[0] = 60.0
    failures.failed(messages[0], ValueError("poison"), first=True)
    assert "(47 more handler failures left out of the log" in caplog.records[-1].getMessage()


def test_a_destination_outage_is_not_a_failure_to_log(caplog: pytest.LogCaptureFixture) -> None:
    """A relay's broker down raises DestinationUnavailable on every retry: no traceback."""
    caplog.set_level("DEBUG", logger="poller.daemon.failure_log")
    messages = [delivery.envelope.payload for delivery in deliveries(3)]
    FailureLog("relay").failed(messages, DestinationUnavailable("broker down"), first=True)
    assert caplog.records == []
