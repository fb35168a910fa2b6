"""The one reconnect policy's pure parts, without sleeping: the backoff (doubling, cap,
jitter, reset by a success that lasted), when an outage is said, and which failures are
transient."""

import psycopg
import pytest

from poller.reconnect import Backoff, Outage, is_transient


def no_jitter() -> float:
    return 0.0


def test_waits_double_from_the_first_to_the_longest() -> None:
    backoff = Backoff(first=0.05, longest=5.0, random=no_jitter)
    waits = [backoff.failed(now=float(n)) for n in range(10)]
    assert waits == [0.05, 0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 5.0, 5.0, 5.0]


def test_jitter_shortens_each_wait_by_up_to_its_share() -> None:
    draws = iter([1.0, 0.5, 0.0])
    backoff = Backoff(first=1.0, longest=8.0, jitter=0.25, random=lambda: next(draws))
    assert [backoff.failed(0.0) for _ in range(3)] == [0.75, 2 * 0.875, 4.0]


def test_a_success_that_lasted_starts_the_waits_over() -> None:
    backoff = Backoff(first=0.05, longest=5.0, random=no_jitter)
    for _ in range(6):
        backoff.failed(0.0)
    backoff.succeeded(100.0)
    assert backoff.failed(105.0) == 0.05  # lost after 5 s: a new outage


def test_a_connection_lost_as_soon_as_made_keeps_backing_off() -> None:
    """A server that accepts and drops every connection is not retried 20 times a second."""
    backoff = Backoff(first=0.05, longest=5.0, random=no_jitter)
    waits = []
    for n in range(6):
        waits.append(backoff.failed(float(n)))
        backoff.succeeded(n + 0.5)
    assert waits == [0.05, 0.1, 0.2, 0.4, 0.8, 1.6]


def test_an_outage_is_said_at_its_start_every_minute_and_at_its_end() -> None:
    outage = Outage(remind_every=60.0)
    said = [outage.failed(now) for now in (10.0, 11.0, 69.0, 70.0, 100.0, 130.0)]
    assert said == ["first", None, None, "still", None, "still"]
    assert outage.ended(142.5) == 132.5
    assert outage.ended(143.0) is None  # over: a success with no outage says nothing
    assert outage.failed(150.0) == "first"


@pytest.mark.parametrize(
    ("message", "transient"),
    [
        ('connection to server at "h", port 1 failed: Connection refused', True),
        ("FATAL:  the database system is starting up", True),
        ("FATAL:  the database system is shutting down", True),
        ("FATAL:  sorry, too many clients already", True),
        ("FATAL:  terminating connection due to administrator command", True),
        ("consuming input failed: server closed the connection unexpectedly", True),
        ("connection timeout expired", True),
        ("failed to resolve host 'db': [Errno -2] Name or service not known", True),
        ('FATAL:  password authentication failed for user "app"', False),
        ('FATAL:  role "app" does not exist', False),
        ('FATAL:  database "nodb" does not exist', False),
        ('FATAL:  no pg_hba.conf entry for host "10.0.0.1", user "app"', False),
        ("server does not support SSL, but SSL was required", False),
        ('connection is bad: invalid sslmode value: "bogus"', False),
    ],
)
def test_only_failures_that_waiting_can_end_are_transient(message: str, transient: bool) -> None:
    assert is_transient(psycopg.OperationalError(message)) is transient


def test_a_url_that_cannot_be_parsed_is_not_transient() -> None:
    assert not is_transient(psycopg.ProgrammingError('missing "=" after "x"'))
