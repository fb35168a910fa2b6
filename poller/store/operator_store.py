"""What the operator façade reads beyond the command line's verbs (sql/operator_queries.sql):
the connected role's privileges, counts of what an action would change, the figures the
console samples, a publication's newest messages."""

from typing import Any, NamedTuple

import psycopg

from outbox.positions import Position
from outbox.queries import load_queries
from poller.membership import ShardUnit
from poller.message import Message
from poller.store.message_reads import message_from_row

OPERATOR_QUERIES = load_queries("operator_queries.sql")


class ShardCheckpoint(NamedTuple):
    subscription: str
    publication: str
    unit: ShardUnit
    checkpoint: Position


class Runtime(NamedTuple):
    """What a subscription's live leaders last wrote, summed over its shards."""

    consumers: int
    in_flight: int
    retrying: int
    buffered: int


class OperatorStore:
    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self._conn = conn

    def privileges(self) -> tuple[str, bool, bool]:
        """The role, whether it reads messages, whether it may change subscriptions."""
        row = self._conn.execute(OPERATOR_QUERIES["role_privileges"]).fetchone()
        assert row is not None  # a SELECT without FROM always returns its one row
        role, reads_messages, acts = row
        return str(role), bool(reads_messages), bool(acts)

    def messages_between(
        self, publication: str, after: Position, up_to: Position, unit: ShardUnit
    ) -> int:
        row = self._conn.execute(
            OPERATOR_QUERIES["messages_between"],
            {
                "publication": publication,
                **after.query_parameters("after_"),
                **up_to.query_parameters("up_to_"),
                "shard_count": unit.shard_count,
                "shard": unit.shard,
            },
        ).fetchone()
        assert row is not None  # count(*) always returns its one row
        return int(row[0])

    def shard_checkpoints(self, subscription: str | None) -> list[ShardCheckpoint]:
        rows = self._conn.execute(
            OPERATOR_QUERIES["shard_checkpoints"], {"subscription": subscription}
        )
        return [
            ShardCheckpoint(name, publication, ShardUnit(count, shard), Position(tx, pos))
            for name, publication, count, shard, tx, pos in rows
        ]

    def runtime(self, subscription: str) -> Runtime | None:
        row = self._conn.execute(
            OPERATOR_QUERIES["subscription_runtime"], {"subscription": subscription}
        ).fetchone()
        return None if row is None else Runtime(*row)

    def count_parked(self, subscription: str, position: int | None) -> int:
        row = self._conn.execute(
            OPERATOR_QUERIES["count_parked"], {"subscription": subscription, "position": position}
        ).fetchone()
        assert row is not None  # count(*) always returns its one row
        return int(row[0])

    def publications(self, *, with_messages: bool) -> list[str]:
        query = "publications" if with_messages else "subscribed_publications"
        return [name for (name,) in self._conn.execute(OPERATOR_QUERIES[query])]

    def latest_messages(self, publication: str, limit: int) -> list[Message]:
        rows = self._conn.execute(
            OPERATOR_QUERIES["latest_messages"], {"publication": publication, "limit": limit}
        )
        return [message_from_row(row) for row in rows]
