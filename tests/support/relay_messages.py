"""Messages for the relay targets' tests, made without a database."""

import datetime

import orjson

from poller.message import Message


def made_messages(
    count: int,
    *,
    publication: str = "orders",
    message_type: str = "order.placed",
    key: str | None = "k",
    first_transaction: int = 1000,
) -> list[Message]:
    """`count` messages of one transaction each, in delivery order, data {"n": i}."""
    now = datetime.datetime.now(datetime.UTC)
    return [
        Message(
            position=n + 1,
            transaction_id=first_transaction + n,
            publication=publication,
            message_id=f"{publication}-{first_transaction + n}-{n + 1}",
            message_type=message_type,
            partition_key=key,
            data_text=orjson.dumps({"n": n}).decode(),
            headers_text='{"trace": "t"}',
            appended_at=now,
        )
        for n in range(count)
    ]
