"""A consumer span around each handler call, continuing the trace its message was written in.

`outbox.append` records the writer's trace context in the message's headers (W3C
`traceparent`, `tracestate`, through OpenTelemetry's propagator); each call of a plain
handler runs in a CONSUMER span whose parent is that context, made current for the handler,
so the handler's own spans (its HTTP calls, its queries) fall under it, in the business
transaction's trace. A batch handler's call is one span that links to each message's
context: the handler works on the batch as one, so its own spans belong to no one message
(per-message spans would be siblings of identical length with the handler's work under none
of them), and OpenTelemetry's messaging conventions give a batch's processing links, a
span having one parent. Attributes follow those conventions (messaging.*), plus `outbox.*`
for what they have no name for (the position, the partition key, the delivery attempt).

Imported only when the process traces (tracing.py).
"""

from collections.abc import Sequence
from typing import Any

from opentelemetry import context, propagate, trace
from opentelemetry.propagators.textmap import Getter
from opentelemetry.trace import Link, SpanKind, Status, StatusCode

from poller.daemon.delivery.handler_calls import CallObserver, Ending, HandlerCall
from poller.message import Message
from poller.printable import error_text

SYSTEM = "outbox"

_NOT_AN_ERROR = frozenset({Ending.DELIVERED, Ending.SKIPPED})


class _TextHeaders(Getter[dict[str, Any]]):
    """A message's headers as a carrier: only text values are header values (an
    application's header named `traceparent` holding a number is no trace context)."""

    def get(self, carrier: dict[str, Any], key: str) -> list[str] | None:
        value = carrier.get(key)
        return [value] if isinstance(value, str) else None

    def keys(self, carrier: dict[str, Any]) -> list[str]:
        return list(carrier)


_TEXT_HEADERS = _TextHeaders()


def written_context(message: Message) -> context.Context:
    """The trace context the message was appended in (empty when it carries none, or
    headers the JSON decoder refuses: a number beyond a double, which jsonb keeps)."""
    try:
        headers = message.headers
    except ValueError:
        return context.Context()
    return propagate.extract(headers, context=context.Context(), getter=_TEXT_HEADERS)


class SpanRecorder(CallObserver):
    def __init__(self, subscription: str, provider: trace.TracerProvider) -> None:
        self._subscription = subscription
        self._tracer = provider.get_tracer("poller")

    def call_started(self, messages: Sequence[Message]) -> tuple[trace.Span, object]:
        first = messages[0]
        attributes: dict[str, str | int] = {
            "messaging.system": SYSTEM,
            "messaging.operation.type": "process",
            "messaging.operation.name": "process",
            "messaging.destination.name": first.publication,
            "messaging.destination.subscription.name": self._subscription,
        }
        links: list[Link] = []
        if len(messages) == 1:
            parent = written_context(first)
            attributes.update(_message_attributes(first))
        else:
            parent = context.Context()  # a root: no one message's trace is the batch's
            attributes["messaging.batch.message_count"] = len(messages)
            for message in messages:
                written = trace.get_current_span(written_context(message)).get_span_context()
                if written.is_valid:
                    links.append(Link(written, _message_attributes(message)))
        span = self._tracer.start_span(
            f"process {first.publication}",
            context=parent,
            kind=SpanKind.CONSUMER,
            attributes=attributes,
            links=links,
        )
        return span, context.attach(trace.set_span_in_context(span, parent))

    def call_ended(self, call: HandlerCall, started: Any) -> None:
        span, token = started
        context.detach(token)
        endings = set(call.endings)
        outcome = "timed_out" if call.timed_out else ",".join(sorted(e.value for e in endings))
        span.set_attribute("outbox.outcome", outcome)
        if call.raised is not None and call.endings[0] is Ending.FAILED:
            span.record_exception(call.raised)
        if call.timed_out or not endings <= _NOT_AN_ERROR:
            error = next((e for e in call.errors if e is not None), None)
            if error is not None:
                span.set_attribute("error.type", type(error).__qualname__)
            described = "ran past message_timeout" if call.timed_out else _described(error)
            span.set_status(Status(StatusCode.ERROR, described))
        span.end()


def _message_attributes(message: Message) -> dict[str, str | int]:
    attributes: dict[str, str | int] = {
        "messaging.message.id": message.message_id,
        "outbox.position": str(message.at),
        "outbox.delivery_attempt": message.delivery_attempt,
    }
    if message.partition_key is not None:
        attributes["outbox.partition_key"] = message.partition_key
    return attributes


def _described(error: BaseException | None) -> str:
    return "" if error is None else error_text(error)[:300]
