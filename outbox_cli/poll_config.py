"""`outbox poll --config FILE` and `outbox relay --config FILE`: a TOML file with
`subscriptions` and `handler` (poll) or a `[relay]` table (relay), validated.

Unknown keys are refused rather than ignored (a misspelt `subscription` would otherwise run
the daemon without it), and `subscriptions = "billing"` is refused rather than read as the
letters b, i, l...
"""

import tomllib
from pathlib import Path

import pydantic

from outbox_cli.errors import CommandUsageError, validation_text


class RelayConfig(pydantic.BaseModel):
    """`[relay]`: `to = "nats://..."`, and `declare = true` to create what `to` names."""

    model_config = pydantic.ConfigDict(extra="forbid", strict=True, frozen=True)

    to: str
    declare: bool = False


class PollConfig(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid", strict=True, frozen=True)

    handler: str | None = None
    relay: RelayConfig | None = None
    subscriptions: list[str] = []


def read_poll_config(path: Path) -> PollConfig:
    try:
        document = tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as error:
        raise CommandUsageError(f"--config {path}: not valid TOML: {error}") from None
    try:
        return PollConfig.model_validate(document)
    except pydantic.ValidationError as error:
        raise CommandUsageError(validation_text(error, f"--config {path}")) from None
