"""SIGTERM while the database is down. Kubernetes and systemd stop a daemon with SIGTERM and
SIGKILL it after a grace period: `outbox poll` must exit within --shutdown-timeout plus the
documented allowance (poller.daemon.runner.STOP_ALLOWANCE) whatever the database does:
refusing connections (a server down), or holding them open without a word (a partition, a
blackholed peer). A leader and a standby each, through a TCP proxy in front of the server."""

import signal
import subprocess
import time
from pathlib import Path

import pytest

from poller.daemon.runner import STOP_ALLOWANCE
from poller.daemon.term.leadership_term import CANCELLING
from tests.support.daemons import Daemon, DaemonGroup, wait_until
from tests.support.databases import server_address, through_port
from tests.support.metrics_scrape import free_port, get, scrape, value
from tests.support.stored import create_subscription
from tests.support.tcp_proxy import TcpProxy

NO_OP = "tests.support.handler_shapes:takes_one"
SHUTDOWN_TIMEOUT = 1.0
# Frequent retention passes, so one is likely under way when the database goes: its thread
# must not hold the exit either.
OPTIONS = ("--shutdown-timeout", str(SHUTDOWN_TIMEOUT), "--retention-interval", "0.2")
# Beyond the bound: the interpreter's own exit, on a loaded two-core machine.
SLACK = 1.5


def exit_times(daemons: list[Daemon], timeout: float) -> dict[str, tuple[int, float]]:
    """SIGTERM each, then each one's exit code and seconds to exit."""
    sent = time.monotonic()
    for daemon in daemons:
        daemon.process.send_signal(signal.SIGTERM)
    exits = {}
    for daemon in daemons:
        try:
            code = daemon.process.wait(timeout=max(0.0, sent + timeout - time.monotonic()))
        except subprocess.TimeoutExpired:
            pytest.fail(f"{daemon.name} still runs {timeout} s after SIGTERM:\n{daemon.log()}")
        exits[daemon.name] = (code, time.monotonic() - sent)
    return exits


@pytest.mark.parametrize("outage", ["refused", "unanswered"])
def test_sigterm_during_an_outage_ends_a_leader_and_a_standby_within_the_bound(
    database_url: str, tmp_path: Path, outage: str
) -> None:
    create_subscription(database_url, "sub", "pub")
    bound = SHUTDOWN_TIMEOUT + STOP_ALLOWANCE
    with TcpProxy(server_address(database_url)) as proxy:
        daemons = DaemonGroup(through_port(database_url, proxy.port), tmp_path)
        try:
            leader = daemons.start("sub", *OPTIONS, handler=NO_OP, name="leader")
            leader.leading_from("sub")
            standby = daemons.start("sub", *OPTIONS, handler=NO_OP, name="standby")
            standby.wait_for_log("has a leader; standing by", 30)
            if outage == "refused":
                proxy.refuse()
                for daemon in (leader, standby):  # its membership and lease share it
                    daemon.wait_for_log("sub: cannot reach the database", 30)
            else:
                proxy.blackhole()
                # The leader's lease and reads, the standby's tries: each waits on an
                # unanswered query.
                wait_until(lambda: len(proxy.held_from) >= 3, 10, "queries into the blackhole")
            exits = exit_times([leader, standby], bound + SLACK)
        finally:
            daemons.kill_all()
    for daemon in (leader, standby):
        code, seconds = exits[daemon.name]
        log = daemon.log()
        assert code == 0, log
        assert seconds <= bound + SLACK, f"{daemon.name} took {seconds:.1f} s:\n{log}"
        assert "poller stopped" in log, log
        after_stop = log[log.index("cannot reach") :] if outage == "refused" else log
        assert "Traceback" not in after_stop, log
    if outage == "refused":
        for daemon in (leader, standby):
            assert "stopping without waiting for the database" in daemon.log(), daemon.log()
    else:
        assert "the database did not answer" in leader.log(), leader.log()


def test_a_leader_whose_database_stops_answering_ends_its_term_when_its_lease_runs_out(
    database_url: str, tmp_path: Path
) -> None:
    """Its renewal waits on a connection that never answers: the term must still end once
    the lease has run out on the server, not when TCP gives up minutes later."""
    create_subscription(database_url, "sub", "pub")
    with TcpProxy(server_address(database_url)) as proxy:
        daemons = DaemonGroup(through_port(database_url, proxy.port), tmp_path)
        try:
            leader = daemons.start("sub", "--lease-seconds", "2", handler=NO_OP, name="leader")
            leader.leading_from("sub")
            proxy.blackhole()
            # The lease, then the cancellation of what waited on the database (CANCELLING).
            leader.wait_for_log("lost leadership of sub", 2 + CANCELLING + SLACK)
        finally:
            daemons.kill_all()


def test_a_daemon_started_while_the_database_is_down_serves_its_probes_then_becomes_ready(
    database_url: str, tmp_path: Path
) -> None:
    """A pod started during a database outage is alive and not ready (the liveness probe
    must not restart it) and says the database is unreachable (OutboxDatabaseUnreachable, not
    OutboxDaemonDown); once the database answers, it starts and becomes ready."""
    create_subscription(database_url, "sub", "pub")
    port = free_port()
    with TcpProxy(server_address(database_url)) as proxy:
        proxy.refuse()
        daemons = DaemonGroup(through_port(database_url, proxy.port), tmp_path)
        try:
            daemon = daemons.start("sub", *OPTIONS, "--metrics-port", str(port), handler=NO_OP)
            daemon.wait_for_log("cannot connect to the database .*; retrying", 30)
            assert get(port, "/healthz") == (200, "alive\n"), daemon.log()
            assert get(port, "/readyz") == (503, "not ready: sub: no database answer yet\n")
            assert value(scrape(port), "outbox_database_up") == 0
            proxy.accept()
            wait_until(lambda: get(port, "/readyz")[0] == 200, 30, "the daemon ready")
            assert value(scrape(port), "outbox_database_up") == 1
            (exits,) = exit_times([daemon], SHUTDOWN_TIMEOUT + STOP_ALLOWANCE + SLACK).values()
        finally:
            daemons.kill_all()
    assert exits[0] == 0, daemon.log()
    assert not daemon.errors(), daemon.log()


def test_sigterm_while_waiting_for_the_database_at_start_ends_the_daemon_cleanly(
    database_url: str, tmp_path: Path
) -> None:
    create_subscription(database_url, "sub", "pub")
    port = free_port()
    with TcpProxy(server_address(database_url)) as proxy:
        proxy.refuse()
        daemons = DaemonGroup(through_port(database_url, proxy.port), tmp_path)
        try:
            daemon = daemons.start("sub", *OPTIONS, "--metrics-port", str(port), handler=NO_OP)
            daemon.wait_for_log("cannot connect to the database .*; retrying", 30)
            assert get(port, "/healthz")[0] == 200
            ((code, _),) = exit_times([daemon], STOP_ALLOWANCE + SLACK).values()
        finally:
            daemons.kill_all()
    log = daemon.log()
    assert code == 0, log
    assert "poller stopped before its start checks were done" in log
    assert not daemon.errors(), log
