"""Writer limits, read from the environment once (OUTBOX_* variables)."""

from functools import cache

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class WriterSettings(BaseSettings):
    """Limits the writer enforces before any SQL runs."""

    model_config = SettingsConfigDict(env_prefix="OUTBOX_", extra="ignore")

    # jsonb itself takes up to 255 MB, but one outbox row that large stalls every poller behind
    # it; a megabyte is a generous ceiling for an event and can be raised per deployment.
    max_payload_bytes: int = Field(default=1_048_576, gt=0)


@cache
def writer_settings() -> WriterSettings:
    return WriterSettings()
