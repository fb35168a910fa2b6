"""Retention as operators see it: what holds each partition back, and the daemon's retention
pass run by hand (`outbox prune`)."""

from poller.retention import RetentionPass, retention_pass
from poller.store.retention_store import (
    MessagePartition,
    PartitionHolder,
    RetentionHolder,
    partition_holders,
    retention_holders,
)

__all__ = [
    "MessagePartition",
    "PartitionHolder",
    "RetentionHolder",
    "RetentionPass",
    "partition_holders",
    "retention_holders",
    "retention_pass",
]
