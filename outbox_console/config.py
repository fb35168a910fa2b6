"""How `outbox console` was started: its database, tokens, sampling, and who it answers."""

import dataclasses
from dataclasses import dataclass, field

from outbox_console.defaults import DEFAULT_SAMPLE_INTERVAL, HISTORY_SECONDS
from outbox_console.hosts import LOOPBACK_NAMES
from outbox_console.tokens import Token


@dataclass(frozen=True)
class ConsoleConfig:
    database_url: str
    tokens: list[Token] = field(default_factory=list)
    """Who may sign in; none: visitors see where subscriptions stand, and nothing more."""
    sample_interval: float = DEFAULT_SAMPLE_INTERVAL
    """Seconds between two readings of the overview (and points of the charts)."""
    read_database_url: str | None = dataclasses.field(default=None, repr=False)
    """The read replica the daemons read messages from: its lag is sampled too."""
    history_seconds: float = HISTORY_SECONDS
    allowed_hosts: frozenset[str] = frozenset(LOOPBACK_NAMES)
    """The names a request's Host may give (hosts.allowed_hosts works them out)."""
    forwarded_allow_ips: tuple[str, ...] = ()
    """The proxies whose X-Forwarded-For and X-Forwarded-Proto are believed; none: nobody's."""
