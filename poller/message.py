"""What a handler receives."""

import datetime
from typing import Any

import orjson

from outbox.positions import Position


class Message:
    """One outbox message as delivered to a handler.

    `data` and `headers` are decoded on first access: decoding jsonb into dicts is the read
    path's bottleneck, so a handler that routes on `message_type` alone never pays for it.

    `appended_at` is when the message was appended: the writer transaction's start time
    (PostgreSQL's now()), so every message of one transaction has the same one. It dates the
    message and nothing more; delivery is never delayed by it, and delivery order is
    (transaction_id, position), not this time. It is an aware datetime; the daemon and
    catch-up reads give it in UTC.

    `transaction_id` is the transaction the message is ordered after: its writer's own, or a
    newer one that had committed before the message was appended (so it comes after every
    message its writer could see). Two transactions' messages may share one.
    """

    __slots__ = (
        "_data",
        "_data_text",
        "_headers",
        "_headers_text",
        "appended_at",
        "at",
        "delivery_attempt",
        "message_id",
        "message_type",
        "partition_key",
        "position",
        "publication",
        "transaction_id",
    )

    def __init__(
        self,
        *,
        position: int,
        transaction_id: int,
        publication: str,
        message_id: str,
        message_type: str,
        partition_key: str | None,
        data_text: str,
        headers_text: str,
        appended_at: datetime.datetime,
        delivery_attempt: int = 1,
    ) -> None:
        self.position = position
        self.transaction_id = transaction_id
        self.publication = publication
        self.message_id = message_id
        self.message_type = message_type
        self.partition_key = partition_key
        self.appended_at = appended_at
        self.delivery_attempt = delivery_attempt
        # Where the message sits in delivery order; computed once, it is read per event.
        self.at = Position(transaction_id, position)
        self._data_text = data_text
        self._headers_text = headers_text
        self._data: Any = _UNDECODED
        self._headers: Any = _UNDECODED

    @classmethod
    def from_row(cls, row: tuple[Any, ...]) -> "Message":
        """From the read query's columns, in its order: one is built per message read, and
        the keyword call of `__init__` (with a NamedTuple's `__new__`) cost 2.5 times this."""
        (
            position,
            transaction_id,
            publication,
            message_id,
            message_type,
            partition_key,
            data_text,
            headers_text,
            appended_at,
        ) = row
        message = object.__new__(cls)
        message.position = position
        message.transaction_id = transaction_id
        message.publication = publication
        message.message_id = message_id
        message.message_type = message_type
        message.partition_key = partition_key
        message.appended_at = appended_at
        message.delivery_attempt = 1
        message.at = _new_position(Position, (transaction_id, position))
        message._data_text = data_text
        message._headers_text = headers_text
        message._data = _UNDECODED
        message._headers = _UNDECODED
        return message

    @property
    def data(self) -> Any:
        if self._data is _UNDECODED:
            self._data = orjson.loads(self._data_text)
        return self._data

    @property
    def data_text(self) -> str:
        """The payload as the JSON text PostgreSQL returned, for handlers that forward it."""
        return self._data_text

    @property
    def headers_text(self) -> str:
        """The headers as the JSON text PostgreSQL returned, for handlers that forward them."""
        return self._headers_text

    @property
    def headers(self) -> dict[str, Any]:
        if self._headers is _UNDECODED:
            self._headers = orjson.loads(self._headers_text)
        headers: dict[str, Any] = self._headers
        return headers

    def with_attempt(self, attempt: int) -> "Message":
        copy = Message.__new__(Message)
        for name in Message.__slots__:
            setattr(copy, name, getattr(self, name))
        copy.delivery_attempt = attempt
        return copy

    def __repr__(self) -> str:
        return (
            f"Message(publication={self.publication!r}, position={self.position},"
            f" transaction_id={self.transaction_id}, message_type={self.message_type!r},"
            f" message_id={self.message_id!r}, attempt={self.delivery_attempt})"
        )


_UNDECODED: Any = object()
_new_position = tuple.__new__  # Position(...) without the NamedTuple's keyword-aware __new__
