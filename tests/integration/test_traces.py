"""One trace from the application's business transaction to the broker's consumer: the span
around the transaction, `outbox.append` recording its context in the message's headers, the
daemon's consumer span around the handler, and, through a relay to NATS, a nats-py consumer
that continues the trace from the message's native headers."""

import asyncio
import threading
import uuid
from collections.abc import Iterator

import nats
import psycopg
import pytest
from opentelemetry import propagate, trace
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanContext, SpanKind, StatusCode

import outbox
import outbox_relays
from outbox_relays import fields
from poller.daemon.background import DaemonThread
from poller.message import Message
from tests.integration.test_daemon import subscribe, wait_for
from tests.support import brokers
from tests.support.broker_reads import from_nats
from tests.support.inprocess import FAST, running_daemon
from tests.support.relay_messages import made_messages
from tests.support.tracing import traced


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    with traced() as exporter:
        yield exporter


def named(exporter: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    return [span for span in exporter.get_finished_spans() if span.name == name]


def parent_of(span: ReadableSpan) -> int | None:
    return None if span.parent is None else span.parent.span_id


def place_orders(database_url: str, count: int) -> list[SpanContext]:
    """`count` business transactions, each in its own span, each appending one message."""
    app = trace.get_tracer("the application")
    written = []
    for n in range(count):
        with (
            app.start_as_current_span("place order") as span,
            psycopg.connect(database_url) as conn,
        ):
            conn.execute("SELECT 1")  # the business rows
            outbox.append(conn, "orders", "OrderPlaced", {"id": n}, partition_key=f"customer-{n}")
            written.append(span.get_span_context())
    return written


def test_a_handler_runs_in_a_consumer_span_continuing_the_business_transaction(
    database_url: str, spans: InMemorySpanExporter
) -> None:
    subscribe(database_url, "handled")
    (written,) = place_orders(database_url, 1)
    handled: list[Message] = []
    inside: list[SpanContext] = []

    def handler(message: Message) -> None:
        inside.append(trace.get_current_span().get_span_context())
        with trace.get_tracer("the application").start_as_current_span("charge card"):
            handled.append(message)

    with running_daemon(database_url, ["handled"], handler):
        wait_for(lambda: bool(named(spans, "charge card")))
    assert handled[0].headers["traceparent"].split("-")[1] == format(written.trace_id, "032x")

    (process,) = named(spans, "process orders")
    assert process.kind is SpanKind.CONSUMER
    assert process.context.trace_id == written.trace_id
    assert parent_of(process) == written.span_id
    assert inside == [process.context]  # current while the handler ran
    (charge,) = named(spans, "charge card")
    assert parent_of(charge) == process.context.span_id
    assert dict(process.attributes or {}) == {
        "messaging.system": "outbox",
        "messaging.operation.type": "process",
        "messaging.operation.name": "process",
        "messaging.destination.name": "orders",
        "messaging.destination.subscription.name": "handled",
        "messaging.message.id": handled[0].message_id,
        "outbox.position": str(handled[0].at),
        "outbox.partition_key": "customer-0",
        "outbox.delivery_attempt": 1,
        "outbox.outcome": "delivered",
    }


def test_a_nats_consumer_continues_the_trace_through_the_relay(
    database_url: str, spans: InMemorySpanExporter
) -> None:
    brokers.require(brokers.NATS)
    subscribe(database_url, "relayed")
    written = place_orders(database_url, 2)  # both in the relay's first batch
    subject = f"traces.{uuid.uuid4().hex[:8]}"
    stream = subject.replace(".", "_").upper()
    url = f"nats://127.0.0.1:4222?subject={subject}&stream={stream}"
    relay = outbox_relays.handler(url, declare=True)
    ready, done = threading.Event(), threading.Event()
    consumed: list[SpanContext] = []

    async def consume() -> None:
        """A nats-py subscriber: each message's context from its headers, a child span."""
        connection = await nats.connect("nats://127.0.0.1:4222")
        try:
            subscription = await connection.subscribe(subject)
            ready.set()
            for _ in written:
                got = await subscription.next_msg(timeout=20)
                parent = propagate.extract(dict(got.headers or {}))
                with trace.get_tracer("the consumer").start_as_current_span(
                    "ship order", context=parent
                ) as span:
                    consumed.append(span.get_span_context())
            await connection.jetstream().delete_stream(stream)
        finally:
            await connection.drain()
            done.set()

    listener = threading.Thread(target=asyncio.run, args=(consume(),))
    listener.start()
    assert ready.wait(10)
    with DaemonThread(database_url, ["relayed"], relay, FAST, closers=[relay.close]):
        assert done.wait(30)
    listener.join()

    (batch,) = named(spans, "process orders")  # one batch call: a root, linked to each message
    assert batch.parent is None
    assert [link.context.span_id for link in batch.links] == [w.span_id for w in written]
    assert dict(batch.attributes or {})["messaging.batch.message_count"] == 2
    sends = named(spans, f"send {relay.target.name}")
    ships = named(spans, "ship order")
    assert [ship.context for ship in ships] == consumed
    for business, send, ship in zip(written, sends, ships, strict=True):
        assert send.kind is SpanKind.PRODUCER
        assert send.context.trace_id == business.trace_id
        assert parent_of(send) == business.span_id
        assert [link.context.span_id for link in send.links] == [batch.context.span_id]
        # The message went with its own context: the consumer continues the business
        # transaction's span, beside the publish, in the one trace.
        assert ship.context.trace_id == business.trace_id
        assert parent_of(ship) == business.span_id


def test_a_failed_call_is_an_error_span_and_its_retry_says_its_attempt(
    database_url: str, spans: InMemorySpanExporter
) -> None:
    subscribe(database_url, "handled", retry_backoff_initial=0.01, retry_backoff_max=0.02)
    place_orders(database_url, 1)
    attempts: list[int] = []

    def handler(message: Message) -> None:
        attempts.append(message.delivery_attempt)
        if message.delivery_attempt == 1:
            raise ValueError("card declined")

    with running_daemon(database_url, ["handled"], handler):
        wait_for(lambda: len(named(spans, "process orders")) == 2)
    failed, retried = named(spans, "process orders")
    assert failed.status.status_code is StatusCode.ERROR
    assert failed.status.description == "ValueError: card declined"
    assert dict(failed.attributes or {})["error.type"] == "ValueError"
    assert dict(failed.attributes or {})["outbox.outcome"] == "failed"
    assert [event.name for event in failed.events] == ["exception"]
    assert dict(retried.attributes or {})["outbox.delivery_attempt"] == 2
    assert retried.status.status_code is StatusCode.UNSET
    assert retried.parent == failed.parent  # both continue the business transaction


def test_a_traced_relay_keeps_the_messages_own_trace_context_and_every_header_exact(
    spans: InMemorySpanExporter,
) -> None:
    """Nothing the message was written with is overwritten or dropped: its `traceparent`,
    and a `tracestate` OpenTelemetry's propagator refuses as invalid, go as written; the
    publish span joins the message's trace as a child of its context."""
    brokers.require(brokers.NATS)
    written = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    appended = {
        "traceparent": written,
        "tracestate": "Not A Valid=entry,,=",
        "n": 1.1,
        "big": 123456789012345678901234567890,
        "baggage": "k=v",
        "Tenant": " acme ",
    }
    (message,) = made_messages(1)
    message._headers_text = (
        f'{{"traceparent": "{written}", "tracestate": "Not A Valid=entry,,=", "n": 1.10,'
        ' "big": 123456789012345678901234567890, "baggage": "k=v", "Tenant": " acme "}'
    )
    (received,) = from_nats([message], relay=True)
    assert fields.read_application_headers(received.headers) == appended
    assert received.headers["n"] == "1.10"  # the JSON text as stored, not re-encoded
    (send,) = [s for s in spans.get_finished_spans() if s.kind is SpanKind.PRODUCER]
    assert send.context.trace_id == 0x0AF7651916CD43DD8448EB211C80319C
    assert parent_of(send) == 0xB7AD6B7169203331


def test_a_message_written_without_a_trace_context_carries_the_publish_spans(
    spans: InMemorySpanExporter,
) -> None:
    brokers.require(brokers.NATS)
    (message,) = made_messages(1)
    message._headers_text = '{"tenant": "acme"}'
    (received,) = from_nats([message], relay=True)
    headers = fields.read_application_headers(received.headers)
    (send,) = [s for s in spans.get_finished_spans() if s.kind is SpanKind.PRODUCER]
    assert headers.pop("traceparent").split("-")[1:3] == [
        f"{send.context.trace_id:032x}",
        f"{send.context.span_id:016x}",
    ]
    assert headers == {"tenant": "acme"}


def test_headers_the_json_decoder_refuses_make_a_span_without_a_parent_not_a_crash() -> None:
    """jsonb keeps 1e400; orjson refuses it: the call still runs, in a root span."""
    from opentelemetry.sdk.trace import ReadableSpan, TracerProvider

    from poller.daemon.delivery.handler_calls import Ending, HandlerCall
    from poller.daemon.reporting.consumer_spans import SpanRecorder

    (message,) = made_messages(1)
    message._headers_text = '{"huge": 1e400}'
    recorder = SpanRecorder("s", TracerProvider())
    started = recorder.call_started((message,))
    call = HandlerCall((message,), (None,), (Ending.DELIVERED,), None, 0.0, 1.0, False)
    recorder.call_ended(call, started)
    span = started[0]
    assert isinstance(span, ReadableSpan)  # the SDK's spans, which know their parent
    assert span.parent is None
