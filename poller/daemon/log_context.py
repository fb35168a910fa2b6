"""Which subscription and which leadership term a log record comes from.

A worker runs in its own asyncio task, and every task of its terms inherits the task's
context, so setting these once per worker (and per term) labels every record logged below it
without passing them to each log call. `LogContextFilter` copies them onto the records, where a
formatter (the CLI's JSON lines) can read them like `extra=` fields.
"""

import contextvars
import logging

SUBSCRIPTION: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "subscription", default=None
)
LEADER_TOKEN: contextvars.ContextVar[int | None] = contextvars.ContextVar(
    "leader_token", default=None
)


class LogContextFilter(logging.Filter):
    """Adds `subscription` and `leader_token` to each record that has none from `extra=`."""

    def filter(self, record: logging.LogRecord) -> bool:
        for variable in (SUBSCRIPTION, LEADER_TOKEN):
            if getattr(record, variable.name, None) is None:
                setattr(record, variable.name, variable.get())
        return True
