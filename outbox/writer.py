"""append / append_many and their async twins.

Sync and async share one source: each write is a plan, a generator that yields
(query, params) and receives the rows back. Two small drivers run a plan, one blocking and one
awaiting, so the logic is written once and cannot drift between the twins.
"""

from collections.abc import Generator, Iterable, Mapping, Sequence
from typing import Any, LiteralString

from outbox.connection import AsyncConnection, Rows, SyncConnection, fetch_all, fetch_all_async
from outbox.encoding import JsonDefault, json_default
from outbox.errors import InvalidMessageError
from outbox.messages import (
    EncodedMessage,
    NewMessage,
    check_name_once,
    encode_message,
    fresh_message_id,
)
from outbox.names import NOTIFY_CHANNEL
from outbox.queries import QUERIES
from outbox.settings import writer_settings
from outbox.trace_context import current_trace_headers

Step = tuple[LiteralString, Mapping[str, Any]]
Plan = Generator[Step, Rows, list[int]]

_APPEND_NEW_MESSAGE = QUERIES["append_new_message"]
_APPEND_MESSAGE = QUERIES["append_message"]
_NOTIFY_PUBLICATION = QUERIES["notify_publication"]


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
    writers, because NOTIFY takes a cluster-wide lock at commit. Inside an OpenTelemetry span
    the headers also get the trace context (`traceparent`, ...; see outbox.trace_context),
    unless `headers` already names those.
    """
    message = _encode_one(
        publication, message_type, data, message_id, partition_key, headers, default
    )
    return _run(conn, _plan_one(publication, message, notify))[0]


def append_many(
    conn: SyncConnection,
    publication: str,
    messages: Iterable[NewMessage],
    *,
    notify: bool = False,
    default: JsonDefault = json_default,
) -> list[int]:
    """Append a batch in one round trip; positions come back in the order given."""
    encoded = _encode_all(publication, list(messages), default)
    return _run(conn, _plan_many(publication, encoded, notify))


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
    message = _encode_one(
        publication, message_type, data, message_id, partition_key, headers, default
    )
    return (await _run_async(conn, _plan_one(publication, message, notify)))[0]


async def append_many_async(
    conn: AsyncConnection,
    publication: str,
    messages: Iterable[NewMessage],
    *,
    notify: bool = False,
    default: JsonDefault = json_default,
) -> list[int]:
    """`append_many` for asynchronous connections."""
    encoded = _encode_all(publication, list(messages), default)
    return await _run_async(conn, _plan_many(publication, encoded, notify))


# Validation and encoding run before a plan exists, so bad input never reaches the connection.


def _encode_one(
    publication: str,
    message_type: str,
    data: Any,
    message_id: str | None,
    partition_key: str | None,
    headers: Mapping[str, Any] | None,
    default: JsonDefault,
) -> EncodedMessage:
    check_name_once("publication", publication)
    limit = writer_settings().max_payload_bytes
    return encode_message(
        message_type,
        data,
        message_id,
        partition_key,
        headers,
        max_payload_bytes=limit,
        default=default,
        trace_headers=current_trace_headers(),
    )


def _encode_all(
    publication: str, messages: list[NewMessage], default: JsonDefault
) -> list[EncodedMessage]:
    check_name_once("publication", publication)
    limit = writer_settings().max_payload_bytes
    trace_headers = current_trace_headers()  # one context for the whole batch
    return [
        encode_message(
            message.message_type,
            message.data,
            message.message_id,
            message.partition_key,
            message.headers,
            max_payload_bytes=limit,
            default=default,
            field_prefix=f"messages[{index}].",
            trace_headers=trace_headers,
        )
        for index, message in enumerate(messages)
    ]


def _plan_one(publication: str, message: EncodedMessage, notify: bool) -> Plan:
    if message.message_id is None:
        # A fresh UUID needs neither the lock nor the lookup. Made here, not by the server:
        # gen_random_uuid() measured dearer in server CPU than this is in the writer's.
        rows = yield (
            _APPEND_NEW_MESSAGE,
            {
                "publication": publication,
                "message_id": fresh_message_id(),
                "message_type": message.message_type,
                "partition_key": message.partition_key,
                "data": message.data,
                "headers": message.headers,
            },
        )
    else:
        # One call: outbox.append_message locks the id, looks it up, and inserts if it is new.
        rows = yield (
            _APPEND_MESSAGE,
            {
                "publication": publication,
                "message_id": message.message_id,
                "message_type": message.message_type,
                "partition_key": message.partition_key,
                "data": message.data,
                "headers": message.headers,
            },
        )
    if notify:
        yield _notify(publication)
    return [rows[0][0]]


def _plan_many(publication: str, encoded: list[EncodedMessage], notify: bool) -> Plan:
    if not encoded:
        return []
    if any(m.message_id is not None for m in encoded):
        # One call, so the locks on the given ids hold until the lookup and insert even when
        # each statement is a transaction of its own (autocommit). The server makes the ids
        # not given (null), so only the given ones are locked and looked up.
        given = [m.message_id for m in encoded]
        rows = yield _append_batch("append_messages", publication, given, encoded)
        positions: list[int] = rows[0][0]
    else:
        # A batch's ids are made here, not by the server: its positions are matched back to
        # the messages by id (RETURNING order is not promised by SQL).
        message_ids = [fresh_message_id() for _ in encoded]
        by_id: dict[str, int] = dict(
            (yield _append_batch("append_new_messages", publication, message_ids, encoded))
        )
        positions = [by_id[message_id] for message_id in message_ids]
    if notify:
        yield _notify(publication)
    return positions


def _append_batch(
    name: str, publication: str, message_ids: Sequence[str | None], encoded: list[EncodedMessage]
) -> Step:
    return QUERIES[name], {
        "publication": publication,
        "message_ids": message_ids,
        "message_types": [m.message_type for m in encoded],
        "partition_keys": [m.partition_key for m in encoded],
        "datas": [m.data for m in encoded],
        "headers": [m.headers for m in encoded],
    }


def _notify(publication: str) -> Step:
    return _NOTIFY_PUBLICATION, {"channel": NOTIFY_CHANNEL, "publication": publication}


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
