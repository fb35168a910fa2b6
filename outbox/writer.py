"""append / append_many and their async twins.

Sync and async share one source: each write is a plan, a generator that yields
(query, params) and receives the rows back. Two small drivers run a plan, one blocking and one
awaiting, so the logic is written once and cannot drift between the twins.
"""

from collections.abc import Generator, Iterable, Mapping
from typing import Any, LiteralString

from outbox.connection import AsyncConnection, Rows, SyncConnection, fetch_all, fetch_all_async
from outbox.encoding import JsonDefault, json_default
from outbox.errors import InvalidMessageError
from outbox.messages import EncodedMessage, NewMessage, check_name, encode_message
from outbox.names import NOTIFY_CHANNEL
from outbox.queries import QUERIES
from outbox.settings import writer_settings

Step = tuple[LiteralString, Mapping[str, Any]]
Plan = Generator[Step, Rows, list[int]]


def append(
    conn: SyncConnection,
    publication: str,
    message_type: str,
    data: Any,
    *,
    message_id: str | None = None,
    partition_key: str | None = None,
    headers: Mapping[str, Any] | None = None,
    notify: bool = False,
    default: JsonDefault = json_default,
) -> int:
    """Append one message inside the caller's transaction and return its position.

    A repeated `message_id` in the same publication writes nothing and returns the position of
    the message already there. `notify=True` wakes pollers at commit; leave it off for busy
    writers, because NOTIFY takes a cluster-wide lock at commit.
    """
    message = NewMessage(message_type, data, message_id, partition_key, headers)
    return _run(conn, _plan(publication, [message], notify, default, single=True))[0]


def append_many(
    conn: SyncConnection,
    publication: str,
    messages: Iterable[NewMessage],
    *,
    notify: bool = False,
    default: JsonDefault = json_default,
) -> list[int]:
    """Append a batch in one round trip; positions come back in the order given."""
    return _run(conn, _plan(publication, list(messages), notify, default, single=False))


async def append_async(
    conn: AsyncConnection,
    publication: str,
    message_type: str,
    data: Any,
    *,
    message_id: str | None = None,
    partition_key: str | None = None,
    headers: Mapping[str, Any] | None = None,
    notify: bool = False,
    default: JsonDefault = json_default,
) -> int:
    """`append` for psycopg.AsyncConnection and SQLAlchemy's async connection or session."""
    message = NewMessage(message_type, data, message_id, partition_key, headers)
    plan = _plan(publication, [message], notify, default, single=True)
    return (await _run_async(conn, plan))[0]


async def append_many_async(
    conn: AsyncConnection,
    publication: str,
    messages: Iterable[NewMessage],
    *,
    notify: bool = False,
    default: JsonDefault = json_default,
) -> list[int]:
    """`append_many` for asynchronous connections."""
    plan = _plan(publication, list(messages), notify, default, single=False)
    return await _run_async(conn, plan)


def _plan(
    publication: str,
    messages: list[NewMessage],
    notify: bool,
    default: JsonDefault,
    *,
    single: bool,
) -> Plan:
    # Validation runs before the first yield, so bad input never reaches the connection.
    encoded = _encode_all(publication, messages, default, single=single)
    if not encoded:
        return []
    if not all(message.generated_id for message in encoded):
        # No unique index can span partitions: the lock makes a concurrent duplicate wait
        # for this transaction, and this one for an earlier duplicate, before the lookup.
        yield _lock_message_ids(publication, encoded)
    if single:
        positions = [row[0] for row in (yield _append_one(publication, encoded[0]))]
    elif all(message.generated_id for message in encoded):
        # RETURNING order is not promised by SQL; the generated ids are unique, so map by them.
        by_id: dict[str, int] = dict(
            (yield _append_batch("append_new_messages", publication, encoded))
        )
        positions = [by_id[message.message_id] for message in encoded]
    else:
        rows = yield _append_batch("append_messages", publication, encoded)
        positions = [row[1] for row in rows]
    if notify:
        yield QUERIES["notify_publication"], {"channel": NOTIFY_CHANNEL, "publication": publication}
    return positions


def _encode_all(
    publication: str, messages: list[NewMessage], default: JsonDefault, *, single: bool
) -> list[EncodedMessage]:
    check_name("publication", publication)
    limit = writer_settings().max_payload_bytes
    return [
        encode_message(
            message,
            max_payload_bytes=limit,
            default=default,
            field_prefix="" if single else f"messages[{index}].",
        )
        for index, message in enumerate(messages)
    ]


def _append_one(publication: str, message: EncodedMessage) -> Step:
    query = QUERIES["append_new_message" if message.generated_id else "append_message"]
    return query, {
        "publication": publication,
        "message_id": message.message_id,
        "message_type": message.message_type,
        "partition_key": message.partition_key,
        "data": message.data,
        "headers": message.headers,
    }


def _append_batch(name: str, publication: str, encoded: list[EncodedMessage]) -> Step:
    return QUERIES[name], {
        "publication": publication,
        "message_ids": [m.message_id for m in encoded],
        "message_types": [m.message_type for m in encoded],
        "partition_keys": [m.partition_key for m in encoded],
        "datas": [m.data for m in encoded],
        "headers": [m.headers for m in encoded],
    }


def _lock_message_ids(publication: str, encoded: list[EncodedMessage]) -> Step:
    return QUERIES["lock_message_ids"], {
        "publication": publication,
        "message_ids": [m.message_id for m in encoded if not m.generated_id],
    }


def _run(conn: SyncConnection, plan: Plan) -> list[int]:
    try:
        query, params = next(plan)
        while True:
            query, params = plan.send(fetch_all(conn, query, params))
    except StopIteration as finished:
        result: list[int] = finished.value
        return result


async def _run_async(conn: AsyncConnection, plan: Plan) -> list[int]:
    try:
        query, params = next(plan)
        while True:
            query, params = plan.send(await fetch_all_async(conn, query, params))
    except StopIteration as finished:
        result: list[int] = finished.value
        return result


__all__ = [
    "InvalidMessageError",
    "append",
    "append_async",
    "append_many",
    "append_many_async",
]
