"""Daemon and CLI settings, from OUTBOX_* environment variables (see
docs/reference/configuration.md)."""

from functools import cache
from pathlib import Path

from pydantic import SecretStr, field_validator

from poller.environment import EnvironmentSettings


class CommandLineSettings(EnvironmentSettings):
    # Unset: the CLI starts an embedded PostgreSQL under data_dir and uses that.
    database_url: str | None = None
    # A hot standby to read messages from (`outbox poll`, `relay`, `status`): unset, none.
    read_database_url: str | None = None
    # OUTBOX_RELAY_TO: `outbox relay`'s destination when --to and --to-file are not given, so
    # a broker's credentials need not be on the command line (which `ps` shows).
    relay_to: str | None = None
    data_dir: Path = Path(".outbox")
    log_level: str = "INFO"
    # OUTBOX_CONSOLE_TOKEN: an operator's token for `outbox console`, which may read messages
    # and act; OUTBOX_CONSOLE_READER_TOKEN: a reader's, which may read (outbox_console.tokens).
    console_token: SecretStr | None = None
    console_reader_token: SecretStr | None = None

    @field_validator("database_url", "read_database_url", "relay_to", mode="before")
    @classmethod
    def _blank_is_unset(cls, value: object) -> object:
        """A URL of white space only is no URL, as an empty one is: libpq would read it as
        an empty conninfo and connect to its defaults (the local socket, as the OS user)."""
        return None if isinstance(value, str) and not value.strip() else value


@cache
def command_line_settings() -> CommandLineSettings:
    return CommandLineSettings()
