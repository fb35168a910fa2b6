"""How far retention has retired a publication, and reads that notice it.

Retention raises a publication's mark (`outbox.retired_positions`) to the last message, in
delivery order, of each partition it drops, in the drop's transaction. A reader after a
position below the mark has lost the retired messages after that position: every message it
would read next sorts after it, and some of them are gone. At or above the mark, nothing it
still needs was retired.
"""

from typing import Any

import psycopg

from outbox.positions import Position, readable
from outbox.queries import QUERIES
from outbox.read_servers import ReadProof, proof_parameters
from poller.message import Message
from poller.store.message_reads import message_from_row


class RetiredPositionError(ValueError):
    """Reading after `after` would skip messages retention has retired (up to `mark`)."""

    def __init__(self, publication: str, after: Position, mark: Position) -> None:
        self.publication = publication
        self.after = after
        self.mark = mark
        super().__init__(
            f"publication {publication!r}: reading after {readable(after)} would skip messages:"
            f" those up to {mark} were retired by retention. A position only holds retention in a"
            " subscription or outbox.consumer_positions; resume at or after the mark to accept"
            " the loss"
        )


def retired_up_to(conn: psycopg.Connection[Any], publication: str) -> Position | None:
    row = conn.execute(QUERIES["retired_up_to"], {"publication": publication}).fetchone()
    return None if row is None else Position(*row)


async def retired_up_to_async(
    conn: psycopg.AsyncConnection[Any], publication: str
) -> Position | None:
    cursor = await conn.execute(QUERIES["retired_up_to"], {"publication": publication})
    row = await cursor.fetchone()
    return None if row is None else Position(*row)


def lock_against_retirement(conn: psycopg.Connection[Any]) -> None:
    """Until `conn`'s transaction ends, no partition is dropped: a position checked against
    the mark and stored in this transaction is seen by the retirement's re-check."""
    conn.execute(QUERIES["lock_messages_against_retirement"])


async def read_leader_batch_async(
    conn: psycopg.AsyncConnection[Any],
    subscription: str,
    publication: str,
    after: Position,
    limit: int,
    proof: ReadProof | None,
) -> list[Message]:
    """read_batch for a plain subscription's leader, refused with RetiredPositionError when
    retention has retired messages after `after` and the read found some of what follows them
    (one cheap statement: a read of nothing skips nothing, the next read that finds rows is
    refused). No further than the barrier once the subscription's shard count changes. Nothing
    is read from a server that fails `proof` (see the query)."""
    parameters = {
        "subscription": subscription,
        "shard_count": 1,
        "publication": publication,
        **after.query_parameters("after_"),
        "limit": limit,
        **proof_parameters(proof),
    }
    cursor = await conn.execute(QUERIES["read_leader_batch"], parameters, binary=True)
    rows = await cursor.fetchall()
    if rows:
        check_not_retired(publication, after, *rows[0][:2])
    return [message_from_row(row[2:]) for row in rows]


async def read_batch_checked_async(
    conn: psycopg.AsyncConnection[Any], publication: str, after: Position, limit: int
) -> list[Message]:
    """read_batch, refused with RetiredPositionError when retention has retired messages
    after `after` (checked in the read's own snapshot, so a drop between reads is caught)."""
    parameters = {"publication": publication, **after.query_parameters("after_"), "limit": limit}
    cursor = await conn.execute(QUERIES["read_batch_with_retired"], parameters, binary=True)
    rows = await cursor.fetchall()
    check_not_retired(publication, after, *rows[0][:2])
    return [message_from_row(row[2:]) for row in rows if row[2] is not None]


def check_not_retired(
    publication: str, after: Position, mark_transaction_id: int | None, mark_position: int | None
) -> None:
    """Raise RetiredPositionError when a read after `after` found the mark (read in its own
    snapshot, null when nothing was retired) past it."""
    if mark_transaction_id is None or mark_position is None:
        return
    mark = Position(mark_transaction_id, mark_position)
    if after < mark:
        raise RetiredPositionError(publication, after, mark)
