"""The daemon, its store, the subscription state machine, and catch-up subscriptions for
consumers that keep their own position."""

from poller.batch_handlers import BatchOutcomes, batch_handler
from poller.catch_up.consumer_positions import (
    ConsumerPositionConflictError,
    load_checkpoint,
    load_checkpoint_async,
    store_checkpoint,
    store_checkpoint_async,
)
from poller.catch_up.signals import CaughtUp, Checkpoint
from poller.catch_up.subscribe import subscribe, subscribe_sync
from poller.handler_deadlines import call_deadline
from poller.handler_requests import DestinationUnavailable, ParkMessage, RetryMessage, SkipMessage
from poller.message import Message
from poller.store.retired_positions import RetiredPositionError

__all__ = [
    "BatchOutcomes",
    "CaughtUp",
    "Checkpoint",
    "ConsumerPositionConflictError",
    "DestinationUnavailable",
    "Message",
    "ParkMessage",
    "RetiredPositionError",
    "RetryMessage",
    "SkipMessage",
    "batch_handler",
    "call_deadline",
    "load_checkpoint",
    "load_checkpoint_async",
    "store_checkpoint",
    "store_checkpoint_async",
    "subscribe",
    "subscribe_sync",
]
