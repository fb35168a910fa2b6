"""docs/message.schema.json describes the messages a relay really sends: real messages,
appended to PostgreSQL and POSTed by the webhook target (one by one and as a batch), each
valid; and the schema is no formality: what breaks it is refused."""

import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema  # type: ignore[import-untyped]  # it ships no types, nor do the dev tools
import orjson
import psycopg
import pytest
from opentelemetry import trace

import outbox
from outbox.positions import START
from poller.message import Message
from poller.store.message_reads import read_batch
from tests.integration.relays.test_webhook_target import Receiver
from tests.support.broker_reads import published
from tests.support.daemons import wait_until
from tests.support.tracing import traced

SCHEMA = json.loads((Path(__file__).parents[3] / "docs" / "message.schema.json").read_text())
VALIDATOR = jsonschema.Draft202012Validator(SCHEMA, format_checker=jsonschema.FormatChecker())


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    receiver = Receiver()
    yield receiver
    receiver.stop()


@pytest.fixture
def appended(database_url: str) -> list[Message]:
    with traced(), psycopg.connect(database_url) as conn:
        outbox.append(conn, "orders", "OrderPlaced", {"id": 1, "lines": [{"sku": "a"}]})
        outbox.append(conn, "orders", "Note", "just text", partition_key="k", message_id="m 2")
        with trace.get_tracer("app").start_as_current_span("business"):
            outbox.append(conn, "orders", "Traced", None, headers={"n": 1.10, "list": [1]})
    with psycopg.connect(database_url, autocommit=True) as conn:
        read = wait_until(lambda: read_batch(conn, "orders", START, 10), 15, "the messages")
    assert len(read) == 3
    return read


@pytest.mark.parametrize("mode", ["message", "batch"])
def test_every_message_a_relay_sends_is_valid(
    appended: list[Message], receiver: Receiver, mode: str
) -> None:
    published(receiver.url(f"mode={mode}"), appended)
    bodies = [orjson.loads(request.body) for request in receiver.requests]
    sent: list[Any] = bodies if mode == "message" else bodies[0]
    assert len(sent) == 3
    for message in sent:
        VALIDATOR.validate(message)
    assert "traceparent" in sent[2]["headers"]


@pytest.mark.parametrize(
    "breaks",
    [
        lambda m: m.pop("position"),
        lambda m: m.update(position="12"),
        lambda m: m.update(partition_key=""),
        lambda m: m.update(appended_at="yesterday"),
        lambda m: m.update(headers=[]),
        lambda m: m.update(extra=1),
        lambda m: m["headers"].update(traceparent="not a trace"),
    ],
)
def test_what_breaks_the_envelope_is_refused(
    appended: list[Message], receiver: Receiver, breaks: Any
) -> None:
    published(receiver.url(), appended[2:])
    message = orjson.loads(receiver.requests[0].body)
    VALIDATOR.validate(message)
    broken = copy.deepcopy(message)
    breaks(broken)
    with pytest.raises(jsonschema.ValidationError):
        VALIDATOR.validate(broken)
