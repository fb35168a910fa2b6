"""OpenTelemetry's SDK for a test: spans kept in memory, under a tracer provider set as the
process's global one for the test only (OpenTelemetry sets it once per process; its own test
utilities reset it the same way)."""

from collections.abc import Iterator
from contextlib import contextmanager

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.util._once import Once


@contextmanager
def traced() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    _reset()
    trace.set_tracer_provider(provider)
    try:
        yield exporter
    finally:
        _reset()
        provider.shutdown()


def _reset() -> None:
    trace._TRACER_PROVIDER_SET_ONCE = Once()
    trace._TRACER_PROVIDER = None
