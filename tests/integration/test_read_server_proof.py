"""The proof every read of a read server carries (sql/fragments.sql, read_server_proven) says
what outbox.read_servers.refusal says of the same server: a standby of the primary's cluster,
or the primary itself, and nothing else. A promoted standby is a server of the cluster that
is not in recovery and is not the primary: the primary with another start time stands in for
it here (test_standby_reads.py promotes real ones)."""

import dataclasses
import datetime
from typing import Any

import psycopg
import pytest
from psycopg import sql

from outbox.queries import load_queries
from outbox.read_servers import (
    ReadProof,
    ServerIdentity,
    proof_parameters,
    refusal,
    server_state,
)
from tests.support.replica_pair import ReplicaPair

PROOF = sql.SQL("SELECT " + load_queries("fragments.sql")["read_server_proven"])


def proven(url: str, parameters: dict[str, Any]) -> bool:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(PROOF, parameters).fetchone()
    assert row is not None
    return bool(row[0])


def refused(url: str, primary: ServerIdentity) -> str | None:
    with psycopg.connect(url, autocommit=True) as conn:
        return refusal(server_state(conn), primary)


@pytest.fixture
def primary_identity(replica_pair: ReplicaPair) -> ServerIdentity:
    with psycopg.connect(replica_pair.primary_url(), autocommit=True) as conn:
        return server_state(conn).identity


@pytest.mark.parametrize(
    ("server", "primary_is", "holds"),
    [
        ("standby", "the primary", True),
        ("primary", "the primary", True),
        ("primary", "restarted since", False),  # not in recovery, not that primary: promoted
        ("standby", "of another cluster", False),
        ("another cluster", "the primary", False),
    ],
)
def test_the_proof_in_sql_holds_where_the_refusal_in_python_finds_nothing(
    replica_pair: ReplicaPair,
    database_url: str,
    primary_identity: ServerIdentity,
    server: str,
    primary_is: str,
    holds: bool,
) -> None:
    url = {
        "standby": replica_pair.standby_url(),
        "primary": replica_pair.primary_url(),
        "another cluster": database_url,
    }[server]
    primary = {
        "the primary": primary_identity,
        "restarted since": dataclasses.replace(
            primary_identity,
            started_at=primary_identity.started_at + datetime.timedelta(microseconds=1),
        ),
        "of another cluster": dataclasses.replace(primary_identity, system_identifier=42),
    }[primary_is]
    parameters = ReadProof(primary, "the read server").query_parameters()
    assert proven(url, parameters) is holds
    assert (refused(url, primary) is None) is holds


def test_reads_on_the_database_itself_have_nothing_to_prove(database_url: str) -> None:
    assert proven(database_url, proof_parameters(None))
