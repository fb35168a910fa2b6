"""A producer span per message a relay publishes.

Each message's span continues the trace the message was written in (its `traceparent`
header, from `outbox.append` or the application) and links to the daemon's consumer span of
the batch (current while the relay runs). The message's headers are its own and go to the
broker exactly as written, its trace context included, even a `tracestate` OpenTelemetry
would drop as invalid: a consumer on NATS, RabbitMQ, Redis or HTTP that extracts it continues
the writer's span, in the same trace as the publish (its sibling, as OpenTelemetry's messaging
conventions propagate a message's creation context). Only a message written without a
`traceparent` gets one: the publish span's, so its consumer still joins a trace, and a header
already there is never replaced.

Imported only when the process traces (tracing.py).
"""

from collections.abc import Mapping, Sequence

import orjson
from opentelemetry import context, propagate, trace
from opentelemetry.trace import Link, SpanKind, Status, StatusCode

from outbox.positions import Position
from outbox_relays import fields
from poller.message import Message

_TRACE_PARENT = "traceparent"


class PublishSpans:
    def __init__(self, target: str, system: str, provider: trace.TracerProvider) -> None:
        self._target = target
        self._system = system
        self._tracer = provider.get_tracer("outbox_relays")

    def started(self, messages: Sequence[Message]) -> tuple[list[Message], list[trace.Span]]:
        """A span per message, and the messages to publish: each as written, but one written
        without a trace context, which carries its span's."""
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
            names = {name for name, _, _ in texts}
            if _TRACE_PARENT in names:
                outgoing.append(message)  # its own context: kept, exactly as written
            else:
                carrier: dict[str, str] = {}
                propagate.inject(carrier, context=trace.set_span_in_context(span, written))
                added = {name: value for name, value in carrier.items() if name not in names}
                outgoing.append(_with_headers(message, added))
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


def _with_headers(message: Message, added: dict[str, str]) -> Message:
    """`message` with the headers `added` after its own, whose JSON text stays exactly as
    PostgreSQL stored it."""
    own = message.headers_text.strip().removesuffix("}").rstrip()
    more = ", ".join(f"{_json(name)}: {_json(value)}" for name, value in added.items())
    separator = "" if not more or own == "{" else ", "
    return Message(
        position=message.position,
        transaction_id=message.transaction_id,
        publication=message.publication,
        message_id=message.message_id,
        message_type=message.message_type,
        partition_key=message.partition_key,
        data_text=message.data_text,
        headers_text=f"{own}{separator}{more}}}",
        appended_at=message.appended_at,
        delivery_attempt=message.delivery_attempt,
    )


def _json(text: str) -> str:
    return orjson.dumps(text).decode()
