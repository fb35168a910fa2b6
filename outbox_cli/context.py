"""What every subcommand shares: the settings and, lazily, the database URL."""

from dataclasses import dataclass, field
from typing import Any

import psycopg

from outbox.database_url import mask_password
from outbox_cli.errors import DatabaseConnectionError
from outbox_cli.settings import CommandLineSettings


@dataclass
class CommandContext:
    settings: CommandLineSettings
    _database_url: str | None = field(default=None, init=False)

    @property
    def database_url(self) -> str:
        """OUTBOX_DATABASE_URL when set, else the embedded server under OUTBOX_DATA_DIR.

        Resolved on first use, so `outbox --help` never starts an embedded server.
        """
        if self._database_url is None:
            if self.settings.database_url:
                self._database_url = self.settings.database_url
            else:
                # Imported only when needed: the embedded server's packages take a third of a
                # second to import.
                from outbox_cli.embedded_server import embedded_database_url

                self._database_url = embedded_database_url(self.settings.data_dir)
        return self._database_url

    def connect(self, **options: Any) -> psycopg.Connection[Any]:
        """A connection to the database; a failure names the URL (password masked)."""
        url = self.database_url
        try:
            return psycopg.connect(url, **options)
        # ValueError: psycopg resolves host names itself, and IDNA refuses some (too long).
        except (psycopg.Error, ValueError, OSError) as error:
            raise DatabaseConnectionError(mask_password(url), error) from None
