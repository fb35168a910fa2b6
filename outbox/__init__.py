"""outbox: append messages to the transactional outbox inside your own transaction.

    with psycopg.connect(url) as conn:
        conn.execute("INSERT INTO orders ...")
        outbox.append(conn, "orders", "OrderPlaced", {"id": 42})
    # committed together, or not at all

The package is also the shared core every other package imports (positions, names and
limits, the database URL's masking, the schema's files). Those modules are light; the writer
pulls in psycopg (and orjson when it is installed), so its names load on first use, and a
Spark worker that only needs `outbox.positions` never pays for them. It needs nothing beyond
psycopg: `pip install outbox-poller` installs that alone.
"""

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    # `import X as X` marks each name as re-exported for mypy --strict.
    from outbox.encoding import JsonDefault as JsonDefault
    from outbox.encoding import json_default as json_default
    from outbox.errors import InvalidMessageError as InvalidMessageError
    from outbox.errors import OutboxError as OutboxError
    from outbox.errors import UnsupportedConnectionError as UnsupportedConnectionError
    from outbox.errors import WriterSettingsError as WriterSettingsError
    from outbox.messages import NewMessage as NewMessage
    from outbox.writer import append as append
    from outbox.writer import append_async as append_async
    from outbox.writer import append_many as append_many
    from outbox.writer import append_many_async as append_many_async

_WRITER_API = {
    "InvalidMessageError": "outbox.errors",
    "JsonDefault": "outbox.encoding",
    "NewMessage": "outbox.messages",
    "OutboxError": "outbox.errors",
    "UnsupportedConnectionError": "outbox.errors",
    "WriterSettingsError": "outbox.errors",
    "append": "outbox.writer",
    "append_async": "outbox.writer",
    "append_many": "outbox.writer",
    "append_many_async": "outbox.writer",
    "json_default": "outbox.encoding",
}

__all__ = sorted(_WRITER_API)


def __getattr__(name: str) -> Any:
    module = _WRITER_API.get(name)
    if module is None:
        raise AttributeError(f"module 'outbox' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_WRITER_API])
