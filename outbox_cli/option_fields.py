"""Which DaemonOptions fields each daemon command offers as command-line options (each field
says whether it is one, and its help text)."""

import dataclasses
from typing import Any

from poller.daemon import DaemonOptions

RETENTION_FIELDS = (
    "retention_minimum_age",
    "partition_size",
    "partitions_ahead",
    "retention_lock_wait",
    "retention_stale_after",
)


def retention_fields() -> list[dataclasses.Field[Any]]:
    """The options `outbox prune` shares with `outbox poll`."""
    return [f for f in dataclasses.fields(DaemonOptions) if f.name in RETENTION_FIELDS]


def command_line_fields() -> list[dataclasses.Field[Any]]:
    """The options `outbox poll` offers, in declaration order."""
    return [f for f in dataclasses.fields(DaemonOptions) if f.metadata["command_line"]]
