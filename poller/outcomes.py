"""The handler requests under the path the README taught first (`poller.outcomes.RetryMessage`);
they live in poller.handler_requests, and `poller` exports them (`poller.RetryMessage`)."""

from poller.handler_requests import DestinationUnavailable, ParkMessage, RetryMessage, SkipMessage

__all__ = ["DestinationUnavailable", "ParkMessage", "RetryMessage", "SkipMessage"]
