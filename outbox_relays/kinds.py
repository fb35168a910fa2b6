"""Which target serves which URL scheme, and the query parameters each takes.

A target module is imported only when a URL names its scheme, so a relay to NATS never needs
the RabbitMQ client installed.
"""

import dataclasses
import importlib

from outbox_relays.target import Target
from outbox_relays.target_url import RelayUrlError, TargetUrl

# Every target takes timeout= (seconds to wait for the broker's confirmation of one batch)
# and format= (outbox, the default, or cloudevents: see cloud_events.py).
_COMMON = frozenset({"timeout", "format"})


@dataclasses.dataclass(frozen=True)
class TargetKind:
    schemes: tuple[str, ...]
    parameters: frozenset[str]
    target_class: str
    """`module:Class`; the class takes (url: TargetUrl, *, declare: bool)."""


KINDS = (
    TargetKind(
        ("nats",),
        _COMMON | {"subject", "stream", "dedup_generation"},
        "outbox_relays.nats_target:NatsTarget",
    ),
    TargetKind(
        ("redis", "rediss"),
        _COMMON | {"stream", "dedup_window", "dedup_generation", "maxlen"},
        "outbox_relays.redis_target:RedisTarget",
    ),
    TargetKind(
        ("amqp", "amqps"),
        _COMMON | {"exchange", "routing_key", "queue"},
        "outbox_relays.rabbitmq_target:RabbitMqTarget",
    ),
    TargetKind(
        ("http", "https"),
        _COMMON | {"mode", "secret_env", "max_messages", "max_bytes"},
        "outbox_relays.webhook_target:WebhookTarget",
    ),
)

SCHEMES = {scheme: kind for kind in KINDS for scheme in kind.schemes}


def open_target(text: str, *, declare: bool = False) -> Target:
    """The target a `--to` URL names, checked but not yet connected.

    Raises RelayUrlError (a ValueError) naming the bad scheme, parameter or template.
    """
    scheme = text.partition("://")[0].lower() if "://" in text else ""
    kind = SCHEMES.get(scheme)
    if kind is None:
        raise RelayUrlError(
            f"--to: scheme {scheme or text!r} is not one of {', '.join(sorted(SCHEMES))}"
        )
    url = TargetUrl.parse(text, kind.parameters)
    module_name, _, class_name = kind.target_class.partition(":")
    target_class = getattr(importlib.import_module(module_name), class_name)
    target: Target = target_class(url, declare=declare)
    return target
