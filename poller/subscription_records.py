"""Subscriptions as stored rows: the settings merge, and reading one back."""

from dataclasses import dataclass
from typing import Any

from poller.positions import Position
from poller.subscription import SubscriptionSettings

# Stored settings override these. One consumer with one message in flight delivers strictly
# in (transaction_id, position) order; more consumers are an explicit choice.
DEFAULT_SETTINGS: dict[str, object] = {
    "strategy": "round-robin",
    "consumers": 1,
    "max_in_flight": 1,
}


def settings_from_stored(stored: dict[str, Any]) -> SubscriptionSettings:
    """Stored JSON over the defaults; `kind` marks non-daemon consumers (Spark) and is not a
    setting of the state machine."""
    merged = {**SubscriptionSettings.from_mapping(DEFAULT_SETTINGS).to_mapping(), **stored}
    merged.pop("kind", None)
    return SubscriptionSettings.from_mapping(merged)


@dataclass(frozen=True)
class SubscriptionRecord:
    subscription_id: str
    publication: str
    checkpoint: Position
    epoch: int
    stored_settings: dict[str, Any]
    replay_requests: int

    @classmethod
    def from_row(cls, row: tuple[Any, ...]) -> "SubscriptionRecord":
        name, publication, transaction_id, position, epoch, settings, replays = row
        return cls(name, publication, Position(transaction_id, position), epoch, settings, replays)

    @property
    def settings(self) -> SubscriptionSettings:
        return settings_from_stored(self.stored_settings)
