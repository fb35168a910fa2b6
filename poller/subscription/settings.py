"""Subscription settings: validated once, stored as a JSON object."""

import dataclasses
import math
from collections.abc import Mapping
from enum import StrEnum
from typing import Any


class Strategy(StrEnum):
    """How messages are spread over a subscription's consumers."""

    ROUND_ROBIN = "round-robin"
    DISPATCH_TO_SINGLE = "dispatch-to-single"
    PINNED = "pinned"


_MINIMUM_INTEGERS = {
    "consumers": 1,
    "max_in_flight": 1,
    "max_retry_count": 1,
    "read_batch_size": 1,
    "buffer_size": 1,
    "min_checkpoint_count": 1,
    "max_checkpoint_count": 1,
}
_POSITIVE_SECONDS = ("message_timeout", "retry_backoff_initial", "retry_backoff_max")


@dataclasses.dataclass(frozen=True, slots=True)
class SubscriptionSettings:
    """One subscription's settings; times are seconds on the daemon's monotonic clock.

    max_retry_count counts delivery attempts, the first included: the attempt that would be
    number max_retry_count + 1 is not made, the message is parked instead.
    """

    strategy: Strategy
    consumers: int
    max_in_flight: int
    message_timeout: float = 30.0
    max_retry_count: int = 10
    retry_backoff_initial: float = 0.1
    retry_backoff_max: float = 10.0
    read_batch_size: int = 500
    buffer_size: int = 1000
    checkpoint_after: float = 2.0
    min_checkpoint_count: int = 10
    max_checkpoint_count: int = 1000

    def __post_init__(self) -> None:
        if not isinstance(self.strategy, Strategy):
            raise ValueError(f"strategy must be one of {_strategy_names()}, got {self.strategy!r}")
        for name, minimum in _MINIMUM_INTEGERS.items():
            value = getattr(self, name)
            # bool is an int subclass; `consumers=True` is a mistake, not 1.
            if type(value) is not int or value < minimum:
                raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
        for name in (*_POSITIVE_SECONDS, "checkpoint_after"):
            value = getattr(self, name)
            if type(value) not in (int, float) or not math.isfinite(value) or value < 0:
                raise ValueError(f"{name} must be a finite number of seconds, got {value!r}")
        for name in _POSITIVE_SECONDS:
            if getattr(self, name) == 0:
                raise ValueError(f"{name} must be greater than 0, got {getattr(self, name)!r}")
        if self.retry_backoff_max < self.retry_backoff_initial:
            raise ValueError(
                f"retry_backoff_max ({self.retry_backoff_max!r}) must be >= "
                f"retry_backoff_initial ({self.retry_backoff_initial!r})"
            )
        if self.max_checkpoint_count < self.min_checkpoint_count:
            raise ValueError(
                f"max_checkpoint_count ({self.max_checkpoint_count!r}) must be >= "
                f"min_checkpoint_count ({self.min_checkpoint_count!r})"
            )

    def retry_delay(self, failed_attempt: int) -> float:
        """Backoff after attempt number `failed_attempt` failed: initial * 2**(n-1), capped.

        No jitter: the machine must be deterministic, and the daemon's consumers share one
        process, so there is no herd of independent clients to spread out.
        """
        try:
            delay = math.ldexp(self.retry_backoff_initial, failed_attempt - 1)
        except OverflowError:
            return self.retry_backoff_max
        return min(delay, self.retry_backoff_max)

    @classmethod
    def from_mapping(cls, mapping: Mapping[str, object]) -> "SubscriptionSettings":
        """Build from a stored JSON object; unknown or missing keys are errors naming the key."""
        names = [field.name for field in dataclasses.fields(cls)]
        for key in mapping:
            if key not in names:
                raise ValueError(f"unknown subscription setting {key!r}")
        for field in dataclasses.fields(cls):
            if field.default is dataclasses.MISSING and field.name not in mapping:
                raise ValueError(f"missing subscription setting {field.name!r}")
        values: dict[str, Any] = dict(mapping)
        strategy = values["strategy"]
        if strategy not in _strategy_names():
            raise ValueError(f"strategy must be one of {_strategy_names()}, got {strategy!r}")
        values["strategy"] = Strategy(strategy)
        return cls(**values)

    def to_mapping(self) -> dict[str, object]:
        """The JSON object from_mapping reads back; strategy as its string value."""
        mapping: dict[str, object] = {
            field.name: getattr(self, field.name) for field in dataclasses.fields(self)
        }
        mapping["strategy"] = self.strategy.value
        return mapping


def _strategy_names() -> list[str]:
    return [strategy.value for strategy in Strategy]
