"""Which subscription, which shard and which leadership term a log record comes from.

A worker runs in its own asyncio task, and every task of its terms inherits the task's
context, so setting these once per worker (and per term) labels every record logged below it
without passing them to each log call. `LogContextFilter` copies them onto the records, where a
formatter (the CLI's text and JSON lines) can read them like `extra=` fields. A process that
leads several shards of one subscription logs the same words for each: the shard says which.
"""

import contextvars
import logging

SUBSCRIPTION: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "subscription", default=None
)
LEADER_TOKEN: contextvars.ContextVar[int | None] = contextvars.ContextVar(
    "leader_token", default=None
)
SHARD: contextvars.ContextVar[str | None] = contextvars.ContextVar("shard", default=None)
"""`SHARD/COUNT` (`2/4`) of the worker; a plain subscription's is `0/1`."""


class LogContextFilter(logging.Filter):
    """Adds `subscription`, `shard` and `leader_token` to each record that has none from
    `extra=`."""

    def filter(self, record: logging.LogRecord) -> bool:
        for variable in (SUBSCRIPTION, SHARD, LEADER_TOKEN):
            if getattr(record, variable.name, None) is None:
                setattr(record, variable.name, variable.get())
        return True
