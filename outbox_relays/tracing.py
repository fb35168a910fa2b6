"""Whether the relay traces its publishes (OpenTelemetry), decided when it is made.

As the daemon decides (`poller/daemon/reporting/tracing.py`): when the OpenTelemetry API has been
imported and a tracer provider is set. Otherwise nothing of OpenTelemetry is imported and a
publish pays nothing for it.
"""

import sys
from typing import TYPE_CHECKING

from outbox_relays.target import Target

if TYPE_CHECKING:
    from outbox_relays.publish_spans import PublishSpans

# messaging.system by URL scheme (OpenTelemetry's names where it has one).
_SYSTEMS = {"amqp": "rabbitmq", "amqps": "rabbitmq", "rediss": "redis", "https": "http"}


def publish_spans(target: Target) -> "PublishSpans | None":
    """The relay's producer spans for `target` (publish_spans.py), or None."""
    if "opentelemetry.trace" not in sys.modules:
        return None
    from opentelemetry import trace

    provider = trace.get_tracer_provider()
    if isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider):
        return None
    from outbox_relays.publish_spans import PublishSpans

    scheme = target.name.partition("://")[0]
    return PublishSpans(target.name, _SYSTEMS.get(scheme, scheme), provider)
