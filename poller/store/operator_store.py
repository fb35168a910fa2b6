"""What the operator façade reads beyond the command line's verbs (sql/operator_queries.sql):
the connected role's privileges, counts of what an action would change (and the actions that
act only on what was counted), the figures the console samples, excerpts of messages."""

import datetime
from typing import Any, NamedTuple

import psycopg

from outbox.positions import Position
from outbox.queries import load_queries
from poller.membership import ShardUnit

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


class MessageExcerpt(NamedTuple):
    """A message as a page shows it: its payload and headers (JSON text) cut to the first
    characters asked for, with their whole lengths."""

    at: Position
    publication: str
    message_id: str
    message_type: str
    partition_key: str | None
    data_start: str
    data_length: int
    headers_start: str
    headers_length: int
    appended_at: datetime.datetime


def excerpt_from_row(row: tuple[Any, ...]) -> MessageExcerpt:
    """From the columns of `{{message_excerpt_columns}}`, in their order."""
    position, transaction_id, *rest = row
    return MessageExcerpt(Position(transaction_id, position), *rest)


class ParkedSet(NamedTuple):
    """The parked messages a replay or a purge acts on (sql: parked_set)."""

    messages: int
    digest: str
    last: Position | None
    """The last of them in delivery order; None when there is none."""


class ParkedExcerpt(NamedTuple):
    message: MessageExcerpt
    attempts: int
    last_error: str
    parked_at: datetime.datetime


class OperatorStore:
    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self._conn = conn

    def privileges(self) -> tuple[str, str, bool, bool]:
        """The role, the database, whether it reads messages, whether it may change
        subscriptions."""
        row = self._conn.execute(OPERATOR_QUERIES["role_privileges"]).fetchone()
        assert row is not None  # a SELECT without FROM always returns its one row
        role, database, reads_messages, acts = row
        return str(role), str(database), bool(reads_messages), bool(acts)

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

    def count_parked(self, subscription: str) -> int:
        row = self._conn.execute(
            OPERATOR_QUERIES["count_parked"], {"subscription": subscription}
        ).fetchone()
        assert row is not None  # count(*) always returns its one row
        return int(row[0])

    def parked_set(self, subscription: str, position: int | None) -> ParkedSet:
        row = self._conn.execute(
            OPERATOR_QUERIES["parked_set"], {"subscription": subscription, "position": position}
        ).fetchone()
        assert row is not None  # an aggregate without GROUP BY always returns its one row
        messages, digest, transaction_id, last_position = row
        last = None if last_position is None else Position(transaction_id, last_position)
        return ParkedSet(int(messages), str(digest), last)

    def purge_parked_as_shown(
        self, subscription: str, position: int | None, shown: ParkedSet
    ) -> list[int]:
        """Drop the parked rows `shown` names, if they are still exactly those (else none);
        the positions dropped."""
        rows = self._conn.execute(
            OPERATOR_QUERIES["purge_parked_as_shown"],
            self._shown_parameters(subscription, position, shown),
        )
        return [row[0] for row in rows]

    def mark_parked_as_shown_for_replay(
        self, subscription: str, position: int | None, shown: ParkedSet
    ) -> list[tuple[Position, ShardUnit]]:
        """Mark the parked rows `shown` names for replay, if they are still exactly those
        (else none); each message's place and the shard whose leader replays it."""
        rows = self._conn.execute(
            OPERATOR_QUERIES["mark_parked_as_shown_for_replay"],
            self._shown_parameters(subscription, position, shown),
        )
        return [(Position(tx, pos), ShardUnit(count, shard)) for tx, pos, shard, count in rows]

    @staticmethod
    def _shown_parameters(
        subscription: str, position: int | None, shown: ParkedSet
    ) -> dict[str, Any]:
        assert shown.last is not None  # an empty set is never shown to be acted on
        return {
            "subscription": subscription,
            "position": position,
            "digest": shown.digest,
            **shown.last.query_parameters("up_to_"),
        }

    def publications(self, *, with_messages: bool) -> list[str]:
        query = "publications" if with_messages else "subscribed_publications"
        return [name for (name,) in self._conn.execute(OPERATOR_QUERIES[query])]

    def latest_messages(self, publication: str, limit: int, shown: int) -> list[MessageExcerpt]:
        rows = self._conn.execute(
            OPERATOR_QUERIES["latest_messages"],
            {"publication": publication, "limit": limit, "shown": shown},
        )
        return [excerpt_from_row(row) for row in rows]

    def parked_message_excerpt(
        self, subscription: str, position: int, shown: int
    ) -> ParkedExcerpt | None:
        row = self._conn.execute(
            OPERATOR_QUERIES["parked_message_excerpt"],
            {"subscription": subscription, "position": position, "shown": shown},
        ).fetchone()
        return None if row is None else ParkedExcerpt(excerpt_from_row(row[:-3]), *row[-3:])
