"""Subscription settings: validated once, stored as a JSON object.

Every setting's default, one-line description, unit and bounds live in its dataclass field's
metadata; `SETTINGS` lists them as `SettingSpec` records, the one source for validation, CLI
option help and the docs' table (reference/subscription-settings.md).
"""

import dataclasses
import math
from collections.abc import Mapping
from enum import StrEnum
from typing import Any

_SPEC = "setting"
"""The key of a field's metadata holding its `_Doc`."""

READ_BATCH_SIZE = 500
"""Rows read from the outbox in one query by default (the read_batch_size setting's), and what
follows one read's worth: a batch handler's default batch, every read of a catch-up
subscription (`poller.subscribe`)."""

WEEK = 604_800
"""The longest time any setting may be, in seconds: a longer one is a typo, not a plan."""


class Strategy(StrEnum):
    """How messages are spread over a subscription's consumers."""

    ROUND_ROBIN = "round-robin"
    DISPATCH_TO_SINGLE = "dispatch-to-single"
    PINNED = "pinned"


@dataclasses.dataclass(frozen=True, slots=True)
class _Doc:
    description: str
    unit: str
    minimum: int | float | None
    maximum: int | float | None
    at_most: str | None


@dataclasses.dataclass(frozen=True, slots=True)
class SettingSpec:
    """What a CLI option or a README table row needs to know of one setting.

    `kind` is int, float (seconds) or Strategy; `minimum`/`maximum` are inclusive and None
    for strategy, whose `choices` are its values instead. `at_most` names the setting this
    one may not exceed, `at_least` the one that may not exceed this one.
    """

    name: str
    kind: type
    description: str
    unit: str
    minimum: int | float | None
    maximum: int | float | None
    default: object
    choices: tuple[str, ...] = ()
    at_most: str | None = None
    at_least: str | None = None

    @property
    def allowed(self) -> str:
        """The values it takes, as the README's table says them."""
        if self.choices:
            return ", ".join(f"`{choice}`" for choice in self.choices)
        allowed = f"{self.minimum} to {self.maximum}{' ' + self.unit if self.unit else ''}"
        if self.at_most:
            allowed += f", at most `{self.at_most}`"
        if self.at_least:
            allowed += f", at least `{self.at_least}`"
        return allowed

    @property
    def help(self) -> str:
        """One line for `--option` help: description, then range or choices and default."""
        default = self.default.value if isinstance(self.default, Strategy) else self.default
        if self.choices:
            allowed = "one of " + ", ".join(self.choices)
        else:
            allowed = f"{self.minimum}..{self.maximum}{' ' + self.unit if self.unit else ''}"
            if self.at_most:
                allowed += f", at most {self.at_most}"
            if self.at_least:
                allowed += f", at least {self.at_least}"
        return f"{self.description} ({allowed}; default {default})"

    def check(self, value: object) -> None:
        """Raise ValueError naming this setting and `value` unless it is allowed."""
        if self.kind is Strategy:
            if not isinstance(value, Strategy):
                raise ValueError(f"{self.name} must be one of {list(self.choices)}, got {value!r}")
            return
        # bool is an int subclass; `consumers=True` is a mistake, not 1.
        kinds = (int,) if self.kind is int else (int, float)
        if not (
            type(value) in kinds
            and isinstance(value, int | float)
            and math.isfinite(value)
            and self.minimum is not None
            and self.maximum is not None
            and self.minimum <= value <= self.maximum
        ):
            what = "an integer" if self.kind is int else "a number of seconds"
            raise ValueError(
                f"{self.name} must be {what} from {self.minimum} to {self.maximum}, got {value!r}"
            )


def _setting(
    default: object,
    description: str,
    unit: str = "",
    minimum: int | float | None = None,
    maximum: int | float | None = None,
    at_most: str | None = None,
) -> Any:
    """`at_most`: the setting this one may not exceed (checked, and said in help and README)."""
    return dataclasses.field(
        default=default, metadata={_SPEC: _Doc(description, unit, minimum, maximum, at_most)}
    )


def _seconds(
    default: float, description: str, minimum: float = 0.001, at_most: str | None = None
) -> Any:
    # 0.001 s: below a millisecond a timeout or backoff is a unit mistake (1e-300 was taken).
    return _setting(default, description, "seconds", minimum, WEEK, at_most)


@dataclasses.dataclass(frozen=True, slots=True)
class SubscriptionSettings:
    """One subscription's settings; times are seconds on the daemon's monotonic clock.

    max_retry_count counts delivery attempts, the first included: the attempt that would be
    number max_retry_count + 1 is not made, the message is parked instead.
    The upper bounds keep a typo from sizing the daemon: consumers=2147483648 once made it
    die of MemoryError.
    """

    # _setting returns a dataclasses.field, which ruff cannot see through.
    strategy: Strategy = _setting(  # noqa: RUF009
        Strategy.ROUND_ROBIN, "How messages are spread over the consumers"
    )
    # One consumer with one message in flight delivers strictly in Position order; more
    # consumers are an explicit choice.
    consumers: int = _setting(1, "Handler instances working in parallel", "consumers", 1, 1024)
    max_in_flight: int = _setting(1, "Messages one consumer handles at once", "messages", 1, 10_000)
    message_timeout: float = _seconds(
        30.0, "How long a handler may run before it counts failed (a batch call: this per message)"
    )
    max_retry_count: int = _setting(
        10, "Delivery attempts, the first included, before a message is parked", "attempts", 1, 1000
    )
    retry_backoff_initial: float = _seconds(
        0.1, "Wait before the second attempt; doubles after", at_most="retry_backoff_max"
    )
    retry_backoff_max: float = _seconds(10.0, "Longest wait between two attempts")
    read_batch_size: int = _setting(
        READ_BATCH_SIZE, "Rows read from the outbox in one query", "rows", 1, 100_000
    )
    buffer_size: int = _setting(
        1000, "Read messages held before reading pauses", "messages", 1, 1_000_000
    )
    checkpoint_after: float = _seconds(
        2.0, "Seconds between checkpoint writes, and idle time that forces one", minimum=0.0
    )
    min_checkpoint_count: int = _setting(
        10,
        "Finished messages before a timed checkpoint write",
        "messages",
        1,
        1_000_000,
        at_most="max_checkpoint_count",
    )
    max_checkpoint_count: int = _setting(
        1000, "Finished messages that force a checkpoint write", "messages", 1, 1_000_000
    )

    def __post_init__(self) -> None:
        for spec in SETTINGS:
            spec.check(getattr(self, spec.name))
        for spec in SETTINGS:
            if spec.at_most is None:
                continue
            value, limit = getattr(self, spec.name), getattr(self, spec.at_most)
            if value > limit:
                # Either may be a default the caller never gave (update merges one change into
                # the stored settings): name both values, and how to get past the other.
                raise ValueError(
                    f"{spec.name} ({value!r}) must not exceed {spec.at_most} ({limit!r});"
                    f" to go past it, set {spec.at_most} too"
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
        """Build from a stored JSON object; a missing key takes its default, an unknown key
        is an error naming it.
        """
        for key in mapping:
            if key not in SETTINGS_BY_NAME:
                raise ValueError(f"unknown subscription setting {key!r}")
        values: dict[str, Any] = dict(mapping)
        if "strategy" in values:
            strategy = values["strategy"]
            if strategy not in _strategy_names():
                raise ValueError(f"strategy must be one of {_strategy_names()}, got {strategy!r}")
            values["strategy"] = Strategy(strategy)
        return cls(**values)

    def to_mapping(self) -> dict[str, object]:
        """The JSON object from_mapping reads back; strategy as its string value."""
        mapping: dict[str, object] = {spec.name: getattr(self, spec.name) for spec in SETTINGS}
        mapping["strategy"] = self.strategy.value
        return mapping


def _strategy_names() -> list[str]:
    return [strategy.value for strategy in Strategy]


def _spec(field: "dataclasses.Field[Any]", at_least: str | None) -> SettingSpec:
    doc: _Doc = field.metadata[_SPEC]
    kind = field.type if isinstance(field.type, type) else type(field.default)
    choices = tuple(_strategy_names()) if kind is Strategy else ()
    return SettingSpec(
        field.name,
        kind,
        doc.description,
        doc.unit,
        doc.minimum,
        doc.maximum,
        field.default,
        choices,
        doc.at_most,
        at_least,
    )


def _specs() -> tuple[SettingSpec, ...]:
    fields = dataclasses.fields(SubscriptionSettings)
    # Each dependency is written once, on the lower setting; the higher one learns it here.
    at_least = {
        field.metadata[_SPEC].at_most: field.name
        for field in fields
        if field.metadata[_SPEC].at_most is not None
    }
    return tuple(_spec(field, at_least.get(field.name)) for field in fields)


SETTINGS: tuple[SettingSpec, ...] = _specs()
"""Every setting in declaration order, for validation, CLI options and documentation."""
SETTINGS_BY_NAME: Mapping[str, SettingSpec] = {spec.name: spec for spec in SETTINGS}
