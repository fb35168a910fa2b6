"""The writer's trace context, for a message's headers, when OpenTelemetry is in use.

`append` records the trace context current in the caller (the business transaction's span)
into the message's headers, through OpenTelemetry's own propagator
(`opentelemetry.propagate.inject`: W3C `traceparent` and `tracestate`, and `baggage`, with the
default propagators; whatever `OTEL_PROPAGATORS` configures). The daemon's consumer span and
the relays continue that trace.

No span can be current unless the application has imported OpenTelemetry's context, so
until it has, this imports nothing and costs one dict lookup: an application without
OpenTelemetry, or with it installed and unused, writes exactly what it gave.
"""

import sys
from collections.abc import Callable, MutableMapping

_inject: Callable[[MutableMapping[str, str]], None] | None = None


def current_trace_headers() -> dict[str, str]:
    """The headers the configured propagators write for the current context (empty outside
    any span)."""
    global _inject
    if "opentelemetry.context" not in sys.modules:
        return {}
    if _inject is None:
        from opentelemetry import propagate

        _inject = propagate.inject
    carrier: dict[str, str] = {}
    _inject(carrier)
    return carrier
