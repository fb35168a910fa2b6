"""A hot standby that messages are read from, against its primary: the daemon's check before
it reads there (a standby of the primary's cluster, or the primary itself: outbox/
read_servers.py says why nothing else is safe), the refusal of a read that failed its own
proof since, and what `outbox status` and the metrics show of it. The read server is asked
first, then the primary: a lag measured from the two is never understated."""

from collections.abc import Mapping
from typing import Any, NamedTuple

import psycopg

from outbox.positions import Position
from outbox.queries import QUERIES
from outbox.read_servers import (
    ReadProof,
    ReplicaLag,
    ServerState,
    behind,
    check_read_server,
    refusal,
    server_state,
)


async def server_state_async(conn: psycopg.AsyncConnection[Any]) -> ServerState:
    cursor = await conn.execute(QUERIES["read_server_state"])
    row = await cursor.fetchone()
    assert row is not None  # a SELECT without FROM always returns its one row
    return ServerState.from_row(row)


async def ensure_read_server_async(
    primary: psycopg.AsyncConnection[Any], read: psycopg.AsyncConnection[Any], masked_url: str
) -> ReadProof:
    """Raises ReadServerRefusedError naming `masked_url` and why; else what each read on
    `read` must prove from then on."""
    read_state = await server_state_async(read)
    return check_read_server(read_state, await server_state_async(primary), masked_url)


async def refuse_unproven(
    read: psycopg.AsyncConnection[Any], proof: ReadProof | None, proven: bool
) -> None:
    """Raises ReadServerRefusedError when a read on `read` failed its proof
    (read_server_proven), saying why as the server stands now."""
    if proven:
        return
    assert proof is not None  # given none (reads on the database itself), the proof holds
    raise proof.refused(await server_state_async(read))


class ReadServerStatus(NamedTuple):
    """A hot standby that messages are read from, against the primary."""

    refused: str | None
    """Why the daemons refuse to read from it (it is no standby of the primary), or None."""
    lag: ReplicaLag
    waiting: frozenset[str]
    """The subscriptions whose stored checkpoint it has not replayed: their reads there find
    nothing, and wait for it."""


def read_server_status(
    conn: psycopg.Connection[Any],
    read_conn: psycopg.Connection[Any],
    checkpoints: Mapping[str, Position],
) -> ReadServerStatus:
    """`read_conn`'s server against `conn`'s, and the subscriptions whose stored checkpoints
    (by name) it has not replayed."""
    read = server_state(read_conn)
    primary = server_state(conn)
    waiting = {
        name
        for name, checkpoint in checkpoints.items()
        if behind(read, primary, checkpoint.transaction_id)
    }
    return ReadServerStatus(
        refusal(read, primary.identity), ReplicaLag.between(read, primary), frozenset(waiting)
    )
