"""Every statement an operator's command runs, one short transaction each (sync psycopg)."""

import datetime
import json
from typing import Any

import psycopg

from outbox.positions import START, Position
from outbox.queries import QUERIES
from poller.membership import ShardUnit
from poller.store.records import SkipRequest, SubscriptionRecord
from poller.store.shard_store import SHARD_ADMIN_QUERIES


class AdminStore:
    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self._conn = conn

    def insert_subscription(
        self,
        name: str,
        publication: str,
        at: Position,
        settings: dict[str, Any],
        shard_count: int = 1,
    ) -> bool:
        """False if the name is taken."""
        row = self._conn.execute(
            QUERIES["create_subscription"],
            {
                "subscription": name,
                "publication": publication,
                **at.query_parameters(),
                "settings": json.dumps(settings),
                "shard_count": shard_count,
            },
        ).fetchone()
        return row is not None

    def lock_subscription(self, name: str) -> SubscriptionRecord | None:
        """The subscription, its row locked until the transaction ends."""
        row = self._conn.execute(
            SHARD_ADMIN_QUERIES["lock_subscription_for_operator"], {"subscription": name}
        ).fetchone()
        return None if row is None else SubscriptionRecord.from_row(row)

    def shard_barrier(self, name: str, publication: str) -> Position:
        """Where a change of the shard count would split delivery now (locks the shard rows)."""
        row = self._conn.execute(
            SHARD_ADMIN_QUERIES["shard_barrier"], {"subscription": name, "publication": publication}
        ).fetchone()
        assert row is not None  # the subscription's own checkpoint is always a candidate
        return Position(*row)

    def insert_shards(self, name: str, shard_count: int, at: Position) -> None:
        """A checkpoint row at `at` for each of `shard_count` shards."""
        self._conn.execute(
            SHARD_ADMIN_QUERIES["insert_shards"],
            {"subscription": name, "shard_count": shard_count, **at.query_parameters()},
        )

    def begin_shard_change(self, name: str, shard_count: int, barrier: Position) -> None:
        self._conn.execute(
            SHARD_ADMIN_QUERIES["begin_shard_change"],
            {"subscription": name, "shard_count": shard_count, **barrier.query_parameters()},
        )

    def seek_shards(self, name: str, to: Position) -> None:
        self._conn.execute(
            SHARD_ADMIN_QUERIES["seek_shards"], {"subscription": name, **to.query_parameters()}
        )

    def subscription(self, name: str) -> SubscriptionRecord | None:
        row = self._conn.execute(QUERIES["get_subscription"], {"subscription": name}).fetchone()
        return None if row is None else SubscriptionRecord.from_row(row)

    def subscriptions(self) -> list[SubscriptionRecord]:
        rows = self._conn.execute(QUERIES["list_subscriptions"])
        return [SubscriptionRecord.from_row(row) for row in rows]

    def delete_subscription(self, name: str) -> bool:
        row = self._conn.execute(QUERIES["delete_subscription"], {"subscription": name})
        return row.fetchone() is not None

    def replace_settings(self, name: str, settings: dict[str, Any]) -> None:
        self._conn.execute(
            QUERIES["update_subscription_settings"],
            {"subscription": name, "settings": json.dumps(settings)},
        )

    def seek(self, name: str, to: Position) -> int | None:
        """The new epoch, or None if there is no such subscription."""
        row = self._conn.execute(
            QUERIES["seek_subscription"], {"subscription": name, **to.query_parameters()}
        ).fetchone()
        return None if row is None else int(row[0])

    def leader_alive(self, name: str) -> bool:
        row = self._conn.execute(QUERIES["leader_alive"], {"subscription": name}).fetchone()
        return bool(row and row[0])

    def mark_for_replay(self, name: str, position: int | None) -> list[tuple[Position, ShardUnit]]:
        """Mark the parked row at `position` (every one: None) for replay; each message's place
        and the shard whose leader replays it."""
        rows = self._conn.execute(
            QUERIES["mark_parked_for_replay"], {"subscription": name, "position": position}
        )
        return [(Position(tx, pos), ShardUnit(count, shard)) for tx, pos, shard, count in rows]

    def request_replay(self, name: str) -> None:
        """Tell the leaders that rows were marked: each reads them at its next renewal."""
        self._conn.execute(QUERIES["request_replay"], {"subscription": name})

    def parked_position_by_id(self, name: str, message_id: str) -> Position | None:
        row = self._conn.execute(
            QUERIES["parked_message_by_id"], {"subscription": name, "message_id": message_id}
        ).fetchone()
        return None if row is None else Position(*row)

    def parked(self, name: str, limit: int, after: Position = START) -> list[tuple[Any, ...]]:
        return self._conn.execute(
            QUERIES["list_parked"],
            {"subscription": name, "limit": limit, **after.query_parameters("after_")},
        ).fetchall()

    def purge_parked(self, name: str, position: int | None) -> int:
        """Drop the parked row at `position` (every one: None); how many went."""
        return self._conn.execute(
            QUERIES["purge_parked"], {"subscription": name, "position": position}
        ).rowcount

    def status(self) -> list[tuple[Any, ...]]:
        """subscription_status's columns, then the oldest transaction the frontier hides."""
        return self._conn.execute(QUERIES["subscription_status_with_hidden"]).fetchall()

    def blockers_before(self, transaction_id: int, *, with_query: bool) -> list[tuple[Any, ...]]:
        """The sessions and prepared transactions holding back rows at `transaction_id`;
        the start of each one's SQL only `with_query`."""
        return self._conn.execute(
            QUERIES["blocking_transactions_before"],
            {"transaction_id": str(transaction_id), "with_query": with_query},
        ).fetchall()

    def next_transaction_id(self) -> int:
        row = self._conn.execute(QUERIES["next_transaction_id"]).fetchone()
        assert row is not None  # a SELECT without FROM always returns its one row
        return int(row[0])

    def message_by_id(self, publication: str, message_id: str) -> tuple[Any, ...] | None:
        return self._conn.execute(
            QUERIES["get_message_by_id"], {"publication": publication, "message_id": message_id}
        ).fetchone()

    def message_at(self, publication: str, at: Position) -> tuple[Any, ...] | None:
        return self._conn.execute(
            QUERIES["get_message_at_position"],
            {"publication": publication, **at.query_parameters()},
        ).fetchone()

    def message_by_position(self, publication: str, position: int) -> tuple[Any, ...] | None:
        return self._conn.execute(
            QUERIES["get_message_by_position"], {"publication": publication, "position": position}
        ).fetchone()

    def delete_publication_messages(self, publication: str) -> int:
        return self._conn.execute(
            QUERIES["delete_publication_messages"], {"publication": publication}
        ).rowcount

    def request_skip(self, name: str, to: Position) -> int | None:
        """The epoch the request was stored in; None when `to` is not past the stored
        checkpoint, a request of this epoch already goes further, or there is no such row."""
        row = self._conn.execute(
            QUERIES["request_skip"], {"subscription": name, **to.query_parameters()}
        ).fetchone()
        return None if row is None else int(row[0])

    def skip_request(self, name: str) -> SkipRequest | None:
        row = self._conn.execute(QUERIES["get_skip_request"], {"subscription": name}).fetchone()
        return None if row is None else SkipRequest.from_columns(*row)

    def parked_message(self, name: str, position: int) -> tuple[Any, ...] | None:
        """The message's columns (message_from_row's), then attempts, last error, parked at."""
        return self._conn.execute(
            QUERIES["get_parked_message"], {"subscription": name, "position": position}
        ).fetchone()

    def first_message_appended_since(
        self, publication: str, since: datetime.datetime
    ) -> tuple[Position | None, datetime.datetime]:
        """The first message appended at or after `since`, in delivery order, and the
        database's clock."""
        row = self._conn.execute(
            QUERIES["first_message_appended_since"], {"publication": publication, "since": since}
        ).fetchone()
        assert row is not None  # one row always: a LEFT JOIN LATERAL on a one-row FROM
        transaction_id, position, now = row
        at = None if transaction_id is None else Position(transaction_id, position)
        return at, now
