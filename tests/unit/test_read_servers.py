"""Which server may serve the snapshot-safe read, and how far behind the primary it is
(outbox/read_servers.py), decided from two servers' states without a database."""

import dataclasses
import datetime

import pytest

from outbox.read_servers import (
    ReadServerRefusedError,
    ReplicaLag,
    ServerState,
    behind,
    check_read_server,
    proof_parameters,
    refusal,
)
from poller.daemon.options import DaemonOptions

NOW = datetime.datetime(2026, 11, 27, 12, 0, tzinfo=datetime.UTC)
PRIMARY = ServerState(
    system_identifier=7712748555116914064,
    started_at=NOW - datetime.timedelta(days=3),
    in_recovery=False,
    wal_position=50_000_000,
    last_replayed_commit_at=None,
    clock=NOW,
    frontier=2_000,
)
STANDBY = dataclasses.replace(
    PRIMARY,
    started_at=NOW - datetime.timedelta(days=1),
    in_recovery=True,
    wal_position=49_000_000,
    last_replayed_commit_at=NOW - datetime.timedelta(seconds=2.5),
    frontier=1_900,
)


def test_a_standby_of_the_primary_and_the_primary_itself_may_serve_reads() -> None:
    assert refusal(STANDBY, PRIMARY.identity) is None
    assert refusal(PRIMARY, PRIMARY.identity) is None


def test_another_cluster_is_refused_whatever_it_is() -> None:
    for other in (STANDBY, PRIMARY):
        stranger = dataclasses.replace(other, system_identifier=42)
        reason = refusal(stranger, PRIMARY.identity)
        assert reason is not None
        assert "not a copy of the primary's cluster" in reason


def test_a_promoted_standby_is_refused() -> None:
    promoted = dataclasses.replace(STANDBY, in_recovery=False)
    reason = refusal(promoted, PRIMARY.identity)
    assert reason is not None
    assert "not in recovery, and it is not the primary" in reason


def test_a_checked_standby_gives_the_proof_each_read_of_it_carries() -> None:
    proof = check_read_server(STANDBY, PRIMARY, "postgresql://app@standby/shop")
    assert proof.query_parameters() == {
        "primary_system_identifier": PRIMARY.system_identifier,
        "primary_started_at": PRIMARY.started_at,
    }
    # The same primary, whatever its frontier or clock said then: one proof for every term.
    later = dataclasses.replace(PRIMARY, frontier=9_000, clock=NOW + datetime.timedelta(hours=1))
    assert check_read_server(STANDBY, later, "postgresql://app@standby/shop") == proof
    with pytest.raises(ReadServerRefusedError, match="not in recovery"):
        check_read_server(dataclasses.replace(STANDBY, in_recovery=False), PRIMARY, "x")


def test_a_read_that_failed_its_proof_is_refused_saying_why_and_that_nothing_was_used() -> None:
    proof = check_read_server(STANDBY, PRIMARY, "postgresql://app@standby/shop")
    error = proof.refused(dataclasses.replace(STANDBY, in_recovery=False))
    assert str(error).startswith("read server postgresql://app@standby/shop refused: it is not")
    assert str(error).endswith("nothing it read was used")


def test_reads_on_the_database_itself_pass_nothing_to_prove() -> None:
    assert set(proof_parameters(None).values()) == {None}


def test_the_lag_is_the_wal_left_to_replay_and_the_age_of_the_last_replayed_commit() -> None:
    assert ReplicaLag.between(STANDBY, PRIMARY) == ReplicaLag(1_000_000, 2.5)


def test_nothing_left_to_replay_is_no_lag_however_old_the_last_commit() -> None:
    idle = dataclasses.replace(
        STANDBY,
        wal_position=PRIMARY.wal_position,
        last_replayed_commit_at=NOW - datetime.timedelta(hours=5),
    )
    assert ReplicaLag.between(idle, PRIMARY) == ReplicaLag(0, 0.0)


def test_a_standby_that_replayed_no_commit_yet_has_an_unknown_age() -> None:
    fresh = dataclasses.replace(STANDBY, last_replayed_commit_at=None)
    lag = ReplicaLag.between(fresh, PRIMARY)
    assert lag == ReplicaLag(1_000_000, None)
    assert lag.describe() == "an unknown time and 1,000,000 bytes of WAL behind the primary"


def test_the_primary_read_as_its_own_replica_has_no_lag() -> None:
    assert ReplicaLag.between(PRIMARY, PRIMARY) == ReplicaLag(0, 0.0)


def test_behind_a_checkpoint_only_when_the_primary_could_read_past_it() -> None:
    # The standby's frontier (1,900) is not past 1,950; the primary's (2,000) is.
    assert behind(STANDBY, PRIMARY, 1_950)
    assert behind(STANDBY, PRIMARY, 1_900)
    assert not behind(STANDBY, PRIMARY, 1_899)  # the standby reads past it too
    # A transaction on the primary holds both frontiers: a stall, not a lagging replica.
    assert not behind(STANDBY, PRIMARY, 2_000)


def test_the_read_url_is_an_option_kept_out_of_its_repr() -> None:
    url = "postgresql://app:secret-word@standby/shop"
    options = DaemonOptions(read_database_url=url)
    assert options.read_database_url == url
    assert "secret-word" not in repr(options)
