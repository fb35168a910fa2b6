"""A producer span per message a relay publishes, and its context in the broker's headers.

Each message's span continues the trace the message was written in (its `traceparent`
header, from `outbox.append`) and links to the daemon's consumer span of the batch (current
while the relay runs); the message goes to the broker with that span's context in place of
the one it was written with, so a consumer on NATS, RabbitMQ, Redis or HTTP that extracts it
starts a child of the publish, in the business transaction's trace. Without tracing in the
relay's process the written context passes through unchanged, and the consumer continues the
writer's span instead.

Imported only when the process traces (tracing.py).
"""

from collections.abc import Mapping, Sequence

import orjson
from opentelemetry import context, propagate, trace
from opentelemetry.trace import Link, SpanKind, Status, StatusCode

from outbox.positions import Position
from outbox_relays import fields
from poller.message import Message

_TRACE_HEADERS = ("traceparent", "tracestate")


class PublishSpans:
    def __init__(self, target: str, system: str, provider: trace.TracerProvider) -> None:
        self._target = target
        self._system = system
        self._tracer = provider.get_tracer("outbox_relays")

    def started(self, messages: Sequence[Message]) -> tuple[list[Message], list[trace.Span]]:
        """A span per message, and the messages to publish, each carrying its span's
        context as its trace headers."""
        batch = trace.get_current_span().get_span_context()
        links = [Link(batch)] if batch.is_valid else []
        outgoing: list[Message] = []
        spans: list[trace.Span] = []
        for message in messages:
            texts = fields.header_texts(message.headers_text)
            written = propagate.extract(
                {name: text for name, text, is_json in texts if not is_json},
                context=context.Context(),
            )
            span = self._tracer.start_span(
                f"send {self._target}",
                context=written,
                kind=SpanKind.PRODUCER,
                links=links,
                attributes={
                    "messaging.system": self._system,
                    "messaging.operation.type": "send",
                    "messaging.operation.name": "send",
                    "messaging.destination.name": self._target,
                    "messaging.message.id": message.message_id,
                    "outbox.position": str(message.at),
                },
            )
            carrier: dict[str, str] = {}
            propagate.inject(carrier, context=trace.set_span_in_context(span, written))
            outgoing.append(_with_headers(message, texts, carrier))
            spans.append(span)
        return outgoing, spans

    def ended(
        self,
        messages: Sequence[Message],
        spans: Sequence[trace.Span],
        unsent: Mapping[Position, object] | None,
        failure: str = "",
    ) -> None:
        """`unsent`: what the broker did not take (None: nothing was, `failure` says why)."""
        for message, span in zip(messages, spans, strict=True):
            why = failure if unsent is None else unsent.get(message.at)
            if why:
                span.set_status(Status(StatusCode.ERROR, str(why)[:300]))
            span.end()


def _with_headers(
    message: Message, texts: list[tuple[str, str, bool]], carrier: dict[str, str]
) -> Message:
    """`message` with the publish span's context (`carrier`) in place of the one it was
    written with; every other header's JSON text exactly as PostgreSQL stored it."""
    kept = [
        f"{_json(name)}: {text if is_json else _json(text)}"
        for name, text, is_json in texts
        if name not in _TRACE_HEADERS and name not in carrier
    ]
    added = [f"{_json(name)}: {_json(value)}" for name, value in carrier.items()]
    return Message(
        position=message.position,
        transaction_id=message.transaction_id,
        publication=message.publication,
        message_id=message.message_id,
        message_type=message.message_type,
        partition_key=message.partition_key,
        data_text=message.data_text,
        headers_text="{" + ", ".join(kept + added) + "}",
        appended_at=message.appended_at,
        delivery_attempt=message.delivery_attempt,
    )


def _json(text: str) -> str:
    return orjson.dumps(text).decode()
