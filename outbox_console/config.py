"""How `outbox console` was started: its database, tokens and sampling."""

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
    history_seconds: float = HISTORY_SECONDS
