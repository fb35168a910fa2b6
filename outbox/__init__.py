"""outbox: append messages to the transactional outbox inside your own transaction.

with psycopg.connect(url) as conn:
    conn.execute("INSERT INTO orders ...")
    outbox.append(conn, "orders", "OrderPlaced", {"id": 42})
# committed together, or not at all
"""

from outbox.encoding import JsonDefault, json_default
from outbox.errors import InvalidMessageError, OutboxError, UnsupportedConnectionError
from outbox.messages import NewMessage
from outbox.writer import append, append_async, append_many, append_many_async

__all__ = [
    "InvalidMessageError",
    "JsonDefault",
    "NewMessage",
    "OutboxError",
    "UnsupportedConnectionError",
    "append",
    "append_async",
    "append_many",
    "append_many_async",
    "json_default",
]
