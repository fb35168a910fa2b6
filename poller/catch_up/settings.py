"""How often a subscription signals a checkpoint: OUTBOX_CHECKPOINT_* variables, overridable
per call. Each default lives here; the docs' table (reference/configuration.md) is checked
against it."""

from typing import Annotated, Any

import pydantic
from pydantic import Field
from pydantic_settings import SettingsConfigDict

from outbox.names import environment_variable
from poller.environment import EnvironmentSettings

Interval = Annotated[int, Field(gt=0)]
Timeout = Annotated[float, Field(gt=0, allow_inf_nan=False)]

_EXPECTED = {
    "checkpoint_interval": "a whole number of messages greater than 0",
    "checkpoint_timeout_secs": "a number of seconds greater than 0",
}


class CheckpointSettingsError(ValueError):
    """A checkpoint setting was refused; the message names the variable or argument and the
    value."""


class CheckpointSettings(EnvironmentSettings):
    """Live checkpoint signals: one after every `checkpoint_interval` live messages, and one
    `checkpoint_timeout_secs` after the last message if something was delivered since the
    last checkpoint."""

    model_config = SettingsConfigDict(frozen=True)

    checkpoint_interval: Interval = 100
    checkpoint_timeout_secs: Timeout = 5.0


def checkpoint_settings(interval: object = None, timeout: object = None) -> CheckpointSettings:
    """The environment's settings with the call's overrides (None keeps the environment's).

    Read at every call, not cached: a subscription starts rarely, and a test or a process that
    sets the variable later expects it to count.
    """
    try:
        from_environment = CheckpointSettings()
    except pydantic.ValidationError as error:
        raise CheckpointSettingsError(_describe(error, environment=True)) from None
    overrides = {
        name: value
        for name, value in (("checkpoint_interval", interval), ("checkpoint_timeout_secs", timeout))
        if value is not None
    }
    try:
        # strict: a per-call True or "5" is a mistake in the caller's code, not a spelling.
        validated = _OVERRIDES.validate_python(overrides, strict=True)
    except pydantic.ValidationError as error:
        raise CheckpointSettingsError(_describe(error, environment=False)) from None
    return from_environment.model_copy(update=validated.model_dump(exclude_none=True))


class _Overrides(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid")

    checkpoint_interval: Interval | None = None
    checkpoint_timeout_secs: Timeout | None = None


_OVERRIDES = pydantic.TypeAdapter(_Overrides)
# The argument names of subscribe() for each setting.
_ARGUMENTS = {
    "checkpoint_interval": "checkpoint_interval",
    "checkpoint_timeout_secs": "checkpoint_timeout",
}


def _describe(error: pydantic.ValidationError, *, environment: bool) -> str:
    problems = []
    for detail in error.errors():
        field = str(detail["loc"][0])
        value: Any = detail.get("input")
        name = environment_variable(field) if environment else _ARGUMENTS[field]
        problems.append(f"{name}={value!r} is refused: expected {_EXPECTED[field]}")
    return "; ".join(problems)
