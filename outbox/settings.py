"""Writer limits, read from the environment once (OUTBOX_* variables)."""

from functools import cache

import pydantic
from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from outbox.errors import WriterSettingsError

_PREFIX = "OUTBOX_"

# What each variable takes, for the refusal (pydantic's own text names neither the variable
# nor, for a bound, the unit).
_EXPECTED = {"max_payload_bytes": "a whole number of bytes greater than 0"}


class WriterSettings(BaseSettings):
    """Limits the writer enforces before any SQL runs."""

    model_config = SettingsConfigDict(env_prefix=_PREFIX, extra="ignore")

    # jsonb itself takes up to 255 MB, but one outbox row that large stalls every poller behind
    # it; a megabyte is a generous ceiling for an event and can be raised per deployment.
    max_payload_bytes: int = Field(default=1_048_576, gt=0)


@cache
def writer_settings() -> WriterSettings:
    """The settings, or WriterSettingsError naming each refused variable and its value (not
    cached: every append raises it again until the variable is fixed)."""
    try:
        return WriterSettings()
    except pydantic.ValidationError as error:
        problems = [
            f"{_PREFIX}{str(detail['loc'][0]).upper()}={detail['input']!r} is refused:"
            f" expected {_EXPECTED[str(detail['loc'][0])]}"
            for detail in error.errors()
        ]
        raise WriterSettingsError("; ".join(problems)) from None
