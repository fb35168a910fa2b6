"""The relay over real targets: what it makes of a confirmation, a refusal for good and an
outage, and the metrics it keeps of each."""

import logging
import uuid
from collections.abc import Mapping, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from threading import Thread

import pytest
import redis

import outbox_relays
from outbox.positions import Position
from outbox_relays.relay import Relay
from outbox_relays.target import BrokerUnavailable, Unsent
from poller.handler_requests import DestinationUnavailable, ParkMessage
from poller.message import Message
from tests.support import brokers
from tests.support.relay_messages import made_messages


def sample(relay: outbox_relays.Relay, name: str, **labels: str) -> float | None:
    return relay.metrics.registry.get_sample_value(name, {"relay": relay.target.name, **labels})


async def test_a_confirmed_batch_finishes_and_is_counted() -> None:
    brokers.require(brokers.REDIS)
    stream = f"relay-test-{uuid.uuid4().hex[:8]}"
    client = redis.Redis(host=brokers.REDIS[1], port=brokers.REDIS[2])
    relay = outbox_relays.handler(f"redis://127.0.0.1:6379/0?stream={stream}", declare=True)
    try:
        assert await relay(made_messages(20)) == {}
        assert client.xlen(stream) == 20
        assert sample(relay, "outbox_relay_messages_published_total") == 20
        assert sample(relay, "outbox_relay_publish_batches_total") == 1
        assert sample(relay, "outbox_relay_publish_seconds_count") == 1
        assert sample(relay, "outbox_relay_failing") == 0
    finally:
        await relay.close()
        client.delete(stream, *client.scan_iter(f"{stream}:outbox-published:*"))


async def test_an_outage_is_destination_unavailable_and_counted_by_kind() -> None:
    relay = outbox_relays.handler("redis://user:s3cret@127.0.0.1:1/0?stream=orders")
    with pytest.raises(DestinationUnavailable) as raised:
        await relay(made_messages(3))
    assert "s3cret" not in str(raised.value)
    assert "redis://***@127.0.0.1:1" in str(raised.value)
    assert relay.problem is not None
    assert sample(relay, "outbox_relay_broker_errors_total", kind="connection") == 1
    assert sample(relay, "outbox_relay_failing") == 1
    assert sample(relay, "outbox_relay_messages_published_total") == 0


class Refusing(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        body = b"unknown order type"
        self.send_response(422)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: object) -> None:
        pass  # keep the test output quiet


async def test_a_refusal_for_good_parks_with_the_status_in_the_reason() -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Refusing)
    Thread(target=server.serve_forever, daemon=True).start()
    relay = outbox_relays.handler(f"http://127.0.0.1:{server.server_address[1]}/hook")
    try:
        messages = made_messages(2)
        outcomes = await relay(messages)
    finally:
        await relay.close()
        server.shutdown()
    assert set(outcomes) == {message.at for message in messages}
    for outcome in outcomes.values():
        assert isinstance(outcome, ParkMessage)
        assert "HTTP 422: unknown order type" in outcome.reason
    assert sample(relay, "outbox_relay_messages_refused_total") == 2


class Answering:
    """A target that answers each batch as the test scripted (the relay's own logic only)."""

    @property
    def name(self) -> str:
        return "scripted://target"

    def __init__(self, unsent: Mapping[Position, Unsent]) -> None:
        self.unsent = unsent

    async def publish(self, messages: Sequence[Message]) -> Mapping[Position, Unsent]:
        return {
            at: answer for at, answer in self.unsent.items() if any(m.at == at for m in messages)
        }

    async def check(self) -> None:
        pass

    async def close(self) -> None:
        pass


async def test_what_the_broker_could_not_take_now_holds_the_later_messages_of_its_key() -> None:
    a0, a1, a2 = made_messages(3, key="a")
    b0, b1 = made_messages(2, key="b", first_transaction=2000)
    (keyless,) = made_messages(1, key=None, first_transaction=3000)
    nacked = BrokerUnavailable("refused", "nacked")
    relay = Relay(Answering({a1.at: nacked, b0.at: "too large"}))

    outcomes = await relay([a0, b0, a1, b1, keyless, a2])

    assert set(outcomes) == {b0.at, a1.at, a2.at}
    assert isinstance(outcomes[b0.at], ParkMessage)  # refused for good: b1 goes on
    assert isinstance(outcomes[a1.at], DestinationUnavailable)
    assert isinstance(outcomes[a2.at], DestinationUnavailable)  # confirmed, but behind a1
    assert f"behind {a1.at} of its key" in str(outcomes[a2.at])
    assert sample(relay, "outbox_relay_messages_published_total") == 3
    assert sample(relay, "outbox_relay_broker_errors_total", kind="refused") == 1
    assert relay.problem == "nacked"


async def test_a_destination_unreachable_at_start_is_checked_later(
    caplog: pytest.LogCaptureFixture,
) -> None:
    relay = outbox_relays.handler("nats://s3cretTOKEN@127.0.0.1:1?subject=orders.out")
    with caplog.at_level(logging.WARNING):
        await relay.check()
    (line,) = [record.getMessage() for record in caplog.records]
    assert "cannot check the destination at start" in line
    assert "checked when the relay connects" in line
    assert "s3cretTOKEN" not in line
