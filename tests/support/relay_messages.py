"""Messages for the relay targets' tests, made without a database."""

import datetime
from collections.abc import Sequence

import orjson

from outbox_relays.target import Unsent
from poller.message import Message


def made_messages(
    count: int,
    *,
    publication: str = "orders",
    message_type: str = "order.placed",
    key: str | None = "k",
    first_transaction: int = 1000,
    message_ids: Sequence[str] | None = None,
) -> list[Message]:
    """`count` messages of one transaction each, in delivery order, data {"n": i}; their ids
    are `message_ids` when given."""
    now = datetime.datetime.now(datetime.UTC)
    return [
        Message(
            position=n + 1,
            transaction_id=first_transaction + n,
            publication=publication,
            message_id=(
                message_ids[n] if message_ids else f"{publication}-{first_transaction + n}-{n + 1}"
            ),
            message_type=message_type,
            partition_key=key,
            data_text=orjson.dumps({"n": n}).decode(),
            headers_text='{"trace": "t"}',
            appended_at=now,
        )
        for n in range(count)
    ]


def refusal(unsent: Unsent) -> str:
    """The reason a target refused a message for good (a str, where an outage is not)."""
    assert isinstance(unsent, str), f"not refused for good: {unsent!r}"
    return unsent
