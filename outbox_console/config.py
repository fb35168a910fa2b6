"""How `outbox console` was started: its database, tokens and sampling."""

import dataclasses
from dataclasses import dataclass, field

from outbox_console.tokens import Token

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8400
DEFAULT_SAMPLE_INTERVAL = 5.0
HISTORY_SECONDS = 3600.0


@dataclass(frozen=True)
class ConsoleConfig:
    database_url: str
    tokens: list[Token] = field(default_factory=list)
    """Who may sign in to act; none: the console is read-only for everybody."""
    sample_interval: float = DEFAULT_SAMPLE_INTERVAL
    """Seconds between two readings of the overview (and points of the charts)."""
    read_database_url: str | None = dataclasses.field(default=None, repr=False)
    """The read replica the daemons read messages from: its lag is sampled too."""
    history_seconds: float = HISTORY_SECONDS
