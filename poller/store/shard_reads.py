"""The statements a shard's leader runs that a plain subscription's leader does not: its
filtered read and parked set, its checkpoint and the subscription's floor, and the end of a
change of the shard count. Loaded from sql/shard_queries.sql."""

from typing import Any, NamedTuple

import psycopg

from outbox.positions import Position
from outbox.queries import load_queries
from outbox.read_servers import ReadProof, proof_parameters
from poller.membership import ShardUnit
from poller.message import Message
from poller.store.message_reads import message_from_row
from poller.store.read_server_check import refuse_unproven

SHARD_QUERIES = load_queries("shard_queries.sql")

Connection = psycopg.AsyncConnection[Any]


def _unit(unit: ShardUnit) -> dict[str, int]:
    return {"shard_count": unit.shard_count, "shard": unit.shard}


class ShardRead(NamedTuple):
    """A shard's part of a read its process shares among the shards it leads."""

    messages: list[Message]
    last_safe: Position | None
    """The shard has no message of its own after its last one here up to this place (the
    read's end: the publication's last safe message, or where the row limit cut it)."""
    oldest_hidden: int | None
    """The oldest committed transaction after the read's start that the frontier hides."""
    more: bool
    """The read stopped at its row limit, before the frontier: read again at once."""


class ShardsBatch(NamedTuple):
    messages: list[tuple[int, Message]]
    """Each message read with its shard, in delivery order."""
    last_safe: Position | None
    """The publication's last message safe to read in the read's snapshot (up to a draining
    count's barrier), of any shard: after a short read the shards have nothing of their own
    up to it."""
    oldest_hidden: int | None
    """The oldest committed transaction after the read's start that the frontier hides."""
    retired_up_to: Position | None
    """The publication's retired-up-to mark in the read's snapshot (None: nothing retired)."""


async def read_shards_batch(
    conn: Connection,
    subscription: str,
    publication: str,
    shard_count: int,
    shards: list[int],
    after: Position,
    limit: int,
    proof: ReadProof | None,
) -> ShardsBatch:
    """Up to `limit` messages of the named shards (of `shard_count`) after `after`, no further
    than the subscription's row allows that count in the read's own snapshot (a draining
    count's barrier; nothing for a count the layout no longer has). The caller checks the
    retired mark against each of its own start positions (see check_not_retired): one read
    serves shards that start at different places. Raises ReadServerRefusedError when the read
    server fails `proof` (nothing was read: not even the last safe message, which a quiet
    shard's checkpoint would move to)."""
    cursor = await conn.execute(
        SHARD_QUERIES["read_shards_batch"],
        {
            "subscription": subscription,
            "publication": publication,
            "shard_count": shard_count,
            "shards": shards,
            **after.query_parameters("after_"),
            "limit": limit,
            **proof_parameters(proof),
        },
        binary=True,
    )
    rows = await cursor.fetchall()
    proven, mark_transaction_id, mark_position, last_transaction_id, last_position = rows[0][:5]
    await refuse_unproven(conn, proof, proven)
    oldest_hidden = rows[0][5]
    mark = None if mark_position is None else Position(mark_transaction_id, mark_position)
    last_safe = None if last_position is None else Position(last_transaction_id, last_position)
    # A read of nothing is one row of null message columns.
    messages = [(row[6], message_from_row(row[7:])) for row in rows if row[6] is not None]
    return ShardsBatch(messages, last_safe, oldest_hidden, mark)


async def shard_parked_rows(
    conn: Connection, subscription: str, unit: ShardUnit
) -> list[tuple[Any, ...]]:
    cursor = await conn.execute(
        SHARD_QUERIES["read_shard_parked_messages"], {"subscription": subscription, **_unit(unit)}
    )
    return await cursor.fetchall()


async def write_shard_checkpoint(conn: Connection, parameters: dict[str, Any]) -> bool:
    """The shard's row (fenced, in the epoch), then the floor in a statement of its own."""
    cursor = await conn.execute(SHARD_QUERIES["write_shard_checkpoint"], parameters)
    if await cursor.fetchone() is None:
        return False
    await conn.execute(
        SHARD_QUERIES["raise_shard_floor"],
        {"subscription": parameters["subscription"], "epoch": parameters["epoch"]},
    )
    return True


async def shard_change_drained(conn: Connection, subscription: str) -> bool:
    """Whether the old shards of a change are done (True when no change is draining)."""
    cursor = await conn.execute(
        SHARD_QUERIES["shard_change_drained"], {"subscription": subscription}
    )
    row = await cursor.fetchone()
    return row is None or bool(row[0])


async def finish_shard_change(conn: Connection, subscription: str) -> bool:
    """End a drained change: drop the old shards' rows and the change (and, for a change to
    one shard, the last row: the subscription is plain again). Re-checked under the row lock,
    so two leaders finishing at once, or a finish racing a seek, do it once or not at all."""
    parameters = {"subscription": subscription}
    async with conn.transaction():
        cursor = await conn.execute(SHARD_QUERIES["lock_subscription"], parameters)
        row = await cursor.fetchone()
        if row is None or row[1] is None:
            return False  # deleted, or another leader finished it
        if not await shard_change_drained(conn, subscription):
            return False
        await conn.execute(SHARD_QUERIES["drop_drained_shards"], parameters)
        if row[0] == 1:
            await conn.execute(SHARD_QUERIES["make_plain"], parameters)
        else:
            await conn.execute(SHARD_QUERIES["raise_shard_floor"], {**parameters, "epoch": row[2]})
    return True
