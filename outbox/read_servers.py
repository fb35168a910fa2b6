"""Reading the outbox from a hot standby: which server may serve the snapshot-safe read, and
how far behind the primary it is. Pure but for `server_state`'s one query; shared by the
daemon, `outbox status`, the metrics and the Spark source (which never import each other).

The rule (`transaction_id < pg_snapshot_xmin(pg_current_snapshot())`) holds on a
streaming-replication standby of the primary: its snapshots are built from the transactions
it knows to be running (KnownAssignedXids), and it counts an xid it has not seen yet, below
one it has, as running; a transaction leaves that set only when its commit or abort record
is replayed, which comes after its rows in the WAL. So below a standby's frontier every
transaction has ended and its rows are there, as on the primary; the frontier is only older.
What breaks the rule is a server whose transaction ids are not the primary's: another
cluster, a logical replica, a standby promoted while the primary still takes writes. Those are
refused (`refusal`), before the reads start and in each read's own statement (`ReadProof`).
"""

import datetime
from dataclasses import dataclass
from typing import Any

import psycopg


class ReadServerRefusedError(ValueError):
    """The read server is not a standby of the primary (nor the primary itself): reading there
    could skip messages. A ValueError: a daemon started with it is misconfigured (exit 2)."""


@dataclass(frozen=True)
class ServerIdentity:
    """Which server: the cluster it is a copy of, and its postmaster's lifetime."""

    system_identifier: int
    started_at: datetime.datetime


@dataclass(frozen=True)
class ServerState:
    """A server as the `read_server_state` query sees it."""

    system_identifier: int
    """Of its cluster: a standby made by pg_basebackup keeps its primary's."""
    started_at: datetime.datetime
    """Its postmaster's start: two servers of one cluster have never started together."""
    in_recovery: bool
    wal_position: int
    """Bytes: a primary's current WAL position, a standby's last replayed one."""
    last_replayed_commit_at: datetime.datetime | None
    """When the last transaction a standby replayed committed (None on a primary)."""
    clock: datetime.datetime
    frontier: int
    """Its safe frontier: pg_snapshot_xmin(pg_current_snapshot())."""

    @classmethod
    def from_row(cls, row: tuple[Any, ...]) -> "ServerState":
        return cls(*row)

    @property
    def identity(self) -> ServerIdentity:
        return ServerIdentity(self.system_identifier, self.started_at)


def server_state(conn: psycopg.Connection[Any]) -> ServerState:
    from outbox.queries import QUERIES  # loads sql/ on first use, not when Spark imports this

    row = conn.execute(QUERIES["read_server_state"]).fetchone()
    assert row is not None  # a SELECT without FROM always returns its one row
    return ServerState.from_row(row)


def refusal(read: ServerState, primary: ServerIdentity) -> str | None:
    """Why the snapshot-safe read must not run on `read` for `primary`'s messages, or None
    when it may: `read` is a standby of the primary's cluster, or the primary itself."""
    if read.system_identifier != primary.system_identifier:
        return (
            f"it is not a copy of the primary's cluster (system identifier"
            f" {read.system_identifier}, the primary's {primary.system_identifier}): its"
            " transaction ids are not the primary's, so its safe frontier says nothing about"
            " the primary's transactions (a logical replica or another cluster)"
        )
    if read.in_recovery or read.started_at == primary.started_at:
        return None
    return (
        "it is not in recovery, and it is not the primary: a standby that was promoted"
        " (a failover, or a split brain) no longer replays the primary's transactions, so"
        " messages the primary commits from now on would never be read there"
    )


def check_read_server(read: ServerState, primary: ServerState, masked_url: str) -> "ReadProof":
    """Raises ReadServerRefusedError naming `masked_url` and why; else what each read of it
    must prove from then on."""
    reason = refusal(read, primary.identity)
    if reason is not None:
        raise ReadServerRefusedError(f"read server {masked_url} refused: {reason}")
    return ReadProof(primary.identity, masked_url)


@dataclass(frozen=True)
class ReadProof:
    """What every read of a read server proves in its own statement: that the server is still
    a standby of the primary's cluster, or is the primary (`refusal`'s rule; in SQL, the
    fragment read_server_proven, given `query_parameters`).

    A check before the reads is not enough: a standby promoted between it and a read counts
    the primary's transactions still open as ended (it never sees their commits), so its
    frontier jumps past them, and a read there delivers what follows them, or moves a quiet
    shard's checkpoint over them, for good. The proof is evaluated after the statement's
    snapshot was taken, and recovery never resumes once it ended, so a proof that holds says
    the snapshot was a standby's."""

    primary: ServerIdentity
    """The primary the check before the reads found."""
    read_server: str
    """The read server's URL, its password masked, to name in a refusal."""

    def query_parameters(self) -> dict[str, Any]:
        return {
            "primary_system_identifier": self.primary.system_identifier,
            "primary_started_at": self.primary.started_at,
        }

    def refused(self, read: ServerState) -> ReadServerRefusedError:
        """The error for a read whose proof failed, `read` being its server as asked since."""
        reason = refusal(read, self.primary) or (
            "it was no standby of the primary's cluster, nor the primary, when it ran a read"
        )
        return ReadServerRefusedError(
            f"read server {self.read_server} refused: {reason}; nothing it read was used"
        )


def proof_parameters(proof: ReadProof | None) -> dict[str, Any]:
    """The parameters of a read's proof; None (the reads go to the database itself) gives
    nulls, which the fragment takes for nothing to prove."""
    if proof is None:
        return {"primary_system_identifier": None, "primary_started_at": None}
    return proof.query_parameters()


@dataclass(frozen=True)
class ReplicaLag:
    """How far a read server is behind its primary."""

    bytes: int
    """WAL the primary has written and the standby has not replayed (0 on the primary)."""
    seconds: float | None
    """0 when nothing is left to replay; else the age of the last transaction it replayed
    (the standby's clock against the primary's commit time), None when it replayed none yet
    since it started."""

    @classmethod
    def between(cls, read: ServerState, primary: ServerState) -> "ReplicaLag":
        """`primary` measured after `read`: a lag is never understated."""
        if not read.in_recovery:
            return cls(0, 0.0)
        lag_bytes = max(0, primary.wal_position - read.wal_position)
        if lag_bytes == 0:
            return cls(0, 0.0)
        if read.last_replayed_commit_at is None:
            return cls(lag_bytes, None)
        age = (read.clock - read.last_replayed_commit_at).total_seconds()
        return cls(lag_bytes, max(0.0, age))

    def describe(self) -> str:
        seconds = "an unknown time" if self.seconds is None else f"{self.seconds:.1f} s"
        return f"{seconds} and {self.bytes:,} bytes of WAL behind the primary"


def behind(read: ServerState, primary: ServerState, transaction_id: int) -> bool:
    """Whether `read` has not replayed what the primary could be read after `transaction_id`
    (a checkpoint's): its frontier is not past it while the primary's is. The read there
    finds nothing after the checkpoint, and must wait; a frontier the primary's long
    transaction holds back is a stall, not a lagging replica."""
    return read.frontier <= transaction_id < primary.frontier
