"""Handlers and operators doing what the daemon must survive: error text PostgreSQL cannot
store, a handler calling sys.exit, one raising an unprintable exception, a BaseException or
KeyboardInterrupt, a subscription deleted under a running daemon, a handler that never returns
when SIGTERM comes."""

import re
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

import outbox
from tests.support.cli import outbox_command
from tests.support.daemons import (
    DaemonGroup,
    create_handled_table,
    daemon_group,
    handled_positions,
    handled_rows,
    wait_until,
)
from tests.support.stored import create_subscription, stored_checkpoint
from tests.support.writers import append_committed

HOSTILE = "tests.support.recording_handler:record_unless_hostile"
HOSTILE_ASYNC = "tests.support.recording_handler:record_unless_hostile_async"


@pytest.fixture
def daemons(database_url: str, tmp_path: Path) -> Iterator[DaemonGroup]:
    create_handled_table(database_url)
    with daemon_group(database_url, tmp_path) as group:
        yield group


def append_typed(url: str, publication: str, message_type: str) -> int:
    with psycopg.connect(url) as conn:
        return outbox.append(conn, publication, message_type, {})


def parked_errors(url: str, subscription: str) -> dict[int, str]:
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT position, last_error FROM outbox.parked_messages WHERE subscription_id = %s",
            (subscription,),
        ).fetchall()
    return dict(rows)


@pytest.mark.parametrize(
    ("message_type", "expected_error", "logged"),
    [
        ("RaisesNul", r"ValueError: bad.?byte x+.*cut \d+", "handler failed on"),
        ("CallsExit", r"sys\.exit\(3\)", "handler raised SystemExit on"),
    ],
)
def test_a_hostile_handler_failure_parks_its_message_and_delivery_goes_on(
    database_url: str, daemons: DaemonGroup, message_type: str, expected_error: str, logged: str
) -> None:
    """And says so at the default level while it happens, with the traceback; the parked
    row keeps where the handler raised it, after the cut of a huge message."""
    create_subscription(database_url, "sub", "pub", max_retry_count=1)
    hostile = append_typed(database_url, "pub", message_type)
    after = set(append_committed(database_url, "pub", 3))
    daemon = daemons.start("sub", handler=HOSTILE)

    wait_until(lambda: handled_positions(database_url) >= after, 30, "the later messages")
    errors = wait_until(lambda: parked_errors(database_url, "sub"), 30, "the parked row")
    assert set(errors) == {hostile}
    assert "\x00" not in errors[hostile]
    assert len(errors[hostile]) <= 2000
    assert re.search(expected_error, errors[hostile]), errors[hostile]
    raised_at = r"\(raised at support/recording_handler\.py:\d+ in record_unless_hostile\)"
    assert re.search(raised_at + r" \(attempt 1 of 1\)$", errors[hostile]), errors[hostile]
    log = daemon.log()
    first_failure = rf" WARNING .*{logged} Message\(.*position={hostile},.*\nTraceback "
    assert re.search(first_failure, log), log
    assert daemon.alive(), daemons.logs()
    assert daemon.terminate() == 0, daemons.logs()


def test_whatever_an_async_handler_raises_its_message_is_retried_parked_and_named(
    database_url: str, daemons: DaemonGroup
) -> None:
    """An unprintable exception spun the event loop at 100% CPU, deaf to SIGTERM; a
    BaseException of the handler's own stalled delivery silently; KeyboardInterrupt ended the
    daemon with "Aborted!", on every restart."""
    create_subscription(database_url, "sub", "pub", max_retry_count=2, retry_backoff_initial=0.05)
    kinds = ["RaisesUnprintable", "RaisesBaseException", "RaisesKeyboardInterrupt"]
    hostile = {append_typed(database_url, "pub", kind): kind for kind in kinds}
    after = set(append_committed(database_url, "pub", 3))
    daemon = daemons.start("sub", handler=HOSTILE_ASYNC)

    wait_until(lambda: handled_positions(database_url) >= after, 30, "the later messages")
    errors = wait_until(
        lambda: (
            found
            if (found := parked_errors(database_url, "sub")).keys() == hostile.keys()
            else None
        ),
        30,
        "the three parked rows",
    )
    says = {
        "RaisesUnprintable": r"^UnprintableError: .*str\(\) failed.* \(attempt 2 of 2\)",
        "RaisesBaseException": r"^the handler raised HandlersOwnBaseError: its own",
        "RaisesKeyboardInterrupt": r"^the handler raised KeyboardInterrupt",
    }
    for position, kind in hostile.items():
        assert re.search(says[kind], errors[position]), errors[position]
    interrupted = next(p for p, kind in hostile.items() if kind == "RaisesKeyboardInterrupt")
    log = daemon.log()
    assert re.search(rf"raised KeyboardInterrupt on .*position={interrupted}\b", log), log
    assert daemon.alive(), daemons.logs()
    assert daemon.terminate(timeout=10) == 0, daemons.logs()


def test_deleting_one_subscription_stops_only_its_worker(
    database_url: str, daemons: DaemonGroup
) -> None:
    create_subscription(database_url, "doomed", "pub")
    create_subscription(database_url, "kept", "pub")
    daemon = daemons.start("doomed", "--subscription", "kept")
    daemon.leading_from("doomed")
    daemon.leading_from("kept")
    first = set(append_committed(database_url, "pub", 3))
    wait_until(
        lambda: len([r for r in handled_rows(database_url) if r.position in first]) == 6,
        30,
        "both subscriptions to deliver the first messages",
    )

    deleted = outbox_command(["subscription", "delete", "doomed"], database_url)
    assert deleted.returncode == 0, deleted.stderr
    daemon.wait_for_log(r"doomed: .*its worker stops", 30)
    later = set(append_committed(database_url, "pub", 3))
    wait_until(lambda: handled_positions(database_url) >= later, 30, "kept to go on")

    assert daemon.alive(), daemons.logs()
    assert daemon.terminate() == 0, daemons.logs()
    later_rows = [row.position for row in handled_rows(database_url) if row.position in later]
    assert sorted(later_rows) == sorted(later), "delivered once, by the kept subscription only"


def test_sigterm_exits_after_the_shutdown_timeout_when_a_handler_never_returns(
    database_url: str, daemons: DaemonGroup
) -> None:
    create_subscription(database_url, "sub", "pub", checkpoint_after=60.0)
    finished = append_committed(database_url, "pub", 3)
    blocking = append_typed(database_url, "pub", "Blocks")
    daemon = daemons.start("sub", "--shutdown-timeout", "1", handler=HOSTILE)
    wait_until(lambda: blocking in handled_positions(database_url), 30, "the handler to block")

    code = daemon.terminate(timeout=15)

    assert code != 0, daemons.logs()
    log = daemon.log()
    assert re.search(rf"still running .*position={blocking}\b", log), log
    assert "Traceback" not in log, log
    # The checkpoint of what finished was written on the way out; the blocked one is not.
    assert stored_checkpoint(database_url, "sub").position == finished[-1]
