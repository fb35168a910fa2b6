"""What every subcommand shares: the settings and, lazily, the database URL."""

from dataclasses import dataclass, field

from poller.database.resolve import resolve_database_url
from poller.settings import PollerSettings


@dataclass
class CommandContext:
    settings: PollerSettings
    _database_url: str | None = field(default=None, init=False)

    @property
    def database_url(self) -> str:
        # Resolved on first use, so `outbox --help` never starts an embedded server.
        if self._database_url is None:
            self._database_url = resolve_database_url(self.settings)
        return self._database_url
