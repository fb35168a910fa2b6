"""Whether this daemon process traces its handler calls (OpenTelemetry), decided at start.

It does when the OpenTelemetry API has been imported (by the application, its SDK set-up,
or `opentelemetry-instrument`) and a tracer provider is set by the time the daemon starts.
The daemon never imports OpenTelemetry itself to find out: where it is not installed, or
installed and unused, nothing of it is imported and no handler call pays anything for it.
"""

import sys

from poller.daemon.delivery.handler_calls import CallObserver


def span_recorder(subscription: str) -> CallObserver | None:
    """A consumer span per handler call of `subscription` (consumer_spans.py), or None when
    this process does not trace."""
    if "opentelemetry.trace" not in sys.modules:
        return None
    from opentelemetry import trace

    provider = trace.get_tracer_provider()
    if isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider):
        return None  # the API alone: every span would be a no-op
    from poller.daemon.reporting.consumer_spans import SpanRecorder

    return SpanRecorder(subscription, provider)
