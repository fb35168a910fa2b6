"""The webhook target against a real HTTP server on 127.0.0.1, run by the test in a thread."""

import asyncio
import base64
import dataclasses
import email.message
import hashlib
import hmac
import logging
import re
import textwrap
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, cast

import orjson
import pytest

from outbox_relays import fields, webhook_target
from outbox_relays.kinds import open_target
from outbox_relays.target import BrokerUnavailable
from outbox_relays.target_url import RelayUrlError
from poller.message import Message
from tests.support.relay_messages import made_messages

SIGNING = {"outbox-signature", "outbox-timestamp"}


@dataclasses.dataclass(frozen=True)
class Request:
    path: str
    headers: email.message.Message
    body: bytes

    def header(self, name: str) -> str | None:
        """A header as a receiver reads it: http.server, as Starlette, Node and most servers
        do, reads header bytes as Latin-1."""
        value: str | None = self.headers.get(name)
        return value

    def header_values(self) -> dict[str, str]:
        return {name: self.headers[name] for name in self.headers}


@dataclasses.dataclass(frozen=True)
class Reply:
    status: int = 200
    body: bytes = b"ok"
    headers: tuple[tuple[str, str], ...] = ()
    hang: bool = False
    """Answer nothing until the test ends."""
    huge: int = 0
    """Answer a body of this many bytes (of x), written until the client stops reading."""


class Receiver:
    """Records every POST and answers with the next of `replies`, or 200 once they run out."""

    def __init__(self) -> None:
        self.requests: list[Request] = []
        self.replies: list[Reply] = []
        self.released = threading.Event()
        self.written = 0
        """Bytes of a huge answer the receiver managed to write."""
        self.huge_done = threading.Event()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as a real receiver would

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.requests.append(Request(self.path, self.headers, body))
                reply = receiver.replies.pop(0) if receiver.replies else Reply()
                if reply.hang:
                    receiver.released.wait(30)
                    self.close_connection = True
                    return
                self.send_response(reply.status)
                for name, value in reply.headers:
                    self.send_header(name, value)
                self.send_header("Content-Length", str(reply.huge or len(reply.body)))
                self.end_headers()
                if reply.huge:
                    self.write_huge(reply.huge)
                else:
                    self.wfile.write(reply.body)

            def write_huge(self, size: int) -> None:
                chunk = b"x" * 65536
                try:
                    while receiver.written < size:
                        self.wfile.write(chunk)
                        receiver.written += len(chunk)
                except OSError:
                    pass  # the client stopped reading and closed
                finally:
                    self.close_connection = True
                    receiver.huge_done.set()

            def log_message(self, format: str, *args: Any) -> None:
                """Quiet: pytest shows what matters."""

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()

    def url(self, query: str = "", path: str = "/hooks/outbox") -> str:
        return f"http://127.0.0.1:{self.port}{path}?{query}"

    def wait_written(self) -> int:
        assert self.huge_done.wait(10), "the huge answer was read to its end"
        return self.written

    def stop(self) -> None:
        self.released.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    receiver = Receiver()
    yield receiver
    receiver.stop()


@pytest.fixture
def secret(monkeypatch: pytest.MonkeyPatch) -> tuple[str, str]:
    """(the name of an environment variable unique to this test, the secret it holds)."""
    variable = f"TEST_WEBHOOK_SECRET_{uuid.uuid4().hex.upper()}"
    value = f"whsec-{uuid.uuid4().hex}"
    monkeypatch.setenv(variable, value)
    return variable, value


Verify = Callable[..., bool]


def documented_verify() -> Verify:
    """The verification snippet of the module's documentation, run as a user would copy it."""
    snippet = re.search(r"::\n\n((?:    .*\n)+)", webhook_target.__doc__ or "")
    assert snippet is not None
    namespace: dict[str, Any] = {}
    exec(textwrap.dedent(snippet[1]), namespace)
    return cast(Verify, namespace["verify"])


def expected_body(message: Message) -> dict[str, Any]:
    return {
        "message_id": message.message_id,
        "message_type": message.message_type,
        "publication": message.publication,
        "partition_key": message.partition_key,
        "position": f"{message.transaction_id}:{message.position}",
        "appended_at": message.appended_at.isoformat(),
        "headers": message.headers,
        "data": message.data,
    }


def sent_ids(receiver: Receiver) -> list[str]:
    return [orjson.loads(request.body)["message_id"] for request in receiver.requests]


def ids(messages: Sequence[Message]) -> list[str]:
    return [message.message_id for message in messages]


async def test_each_message_is_one_signed_post_in_order_with_every_field(
    receiver: Receiver, secret: tuple[str, str]
) -> None:
    variable, value = secret
    messages = (
        made_messages(20)
        + made_messages(1, key=None, first_transaction=2000)
        + made_messages(1, key="clé ü", first_transaction=3000)
    )
    target = open_target(receiver.url(f"secret_env={variable}"))
    assert await target.publish(messages[:10]) == {}
    await target.close()  # publish reconnects after close
    assert await target.publish(messages[10:]) == {}
    await target.close()

    verify = documented_verify()
    assert len(receiver.requests) == len(messages)
    for request, message in zip(receiver.requests, messages, strict=True):
        assert request.path == "/hooks/outbox"  # the relay's own parameters are not sent
        assert orjson.loads(request.body) == expected_body(message)
        # The payload and headers go as PostgreSQL's texts, not re-encoded.
        assert f'"headers":{message.headers_text},'.encode() in request.body
        assert request.header("Content-Type") == "application/json"
        # Exact once decoded: a value beyond ASCII (the key "clé ü") goes percent-encoded.
        read = fields.read_header_fields(request.header_values())
        assert {field: read.get(field) for field in read if field not in SIGNING} == (
            fields.metadata(message)
        )
        assert verify(value.encode(), request.headers, request.body)
        assert not verify(b"another secret", request.headers, request.body)
        assert not verify(value.encode(), request.headers, request.body + b" ")
    assert receiver.requests[20].header(fields.PARTITION_KEY) is None

    # A captured request replayed later: correctly signed, but too old.
    request = receiver.requests[0]
    stamp = str(int(time.time()) - 600)
    mac = hmac.new(value.encode(), f"{stamp}.".encode() + request.body, hashlib.sha256)
    replayed = {"Outbox-Timestamp": stamp, "Outbox-Signature": f"sha256={mac.hexdigest()}"}
    assert not verify(value.encode(), replayed, request.body)
    assert verify(value.encode(), replayed, request.body, max_age=900)


async def test_mode_batch_sends_one_array_unsigned_without_secret_env(receiver: Receiver) -> None:
    messages = made_messages(30) + made_messages(1, key=None, first_transaction=2000)
    target = open_target(receiver.url("mode=batch"))
    assert await target.publish(messages) == {}
    assert await target.publish([]) == {}
    await target.close()
    [request] = receiver.requests
    assert orjson.loads(request.body) == [expected_body(m) for m in messages]
    assert request.header("Content-Type") == "application/json"
    assert request.header("Outbox-Signature") is None
    assert request.header("Outbox-Timestamp") is None
    assert request.header(fields.MESSAGE_ID) is None  # per-message fields are in the body only


async def test_a_republished_batch_arrives_again_with_the_same_message_ids(
    receiver: Receiver,
) -> None:
    """After a crash the relay sends the batch again: at least once, de-duplicated by id."""
    messages = made_messages(3)
    before_crash = open_target(receiver.url())
    assert await before_crash.publish(messages) == {}
    await before_crash.close()
    after_restart = open_target(receiver.url())
    assert await after_restart.publish(messages) == {}
    await after_restart.close()
    assert sent_ids(receiver) == ids(messages) * 2
    assert [r.header(fields.MESSAGE_ID) for r in receiver.requests] == ids(messages) * 2


@pytest.mark.parametrize("status", [500, 503, 429, 408])
async def test_a_server_error_makes_the_batch_wait_then_it_goes_through(
    receiver: Receiver, status: int
) -> None:
    messages = made_messages(5)
    target = open_target(receiver.url("mode=batch"))
    receiver.replies = [Reply(status, b"try later")]
    with pytest.raises(BrokerUnavailable) as raised:
        await target.publish(messages)
    assert raised.value.kind == "server_error"
    assert f"HTTP {status}: try later" in raised.value.reason
    assert await target.publish(messages) == {}
    await target.close()
    first, second = receiver.requests
    assert first.body == second.body
    assert orjson.loads(second.body) == [expected_body(m) for m in messages]


async def test_mode_message_names_each_outcome_and_the_rest_waits_behind_a_failure(
    receiver: Receiver,
) -> None:
    messages = made_messages(5)
    target = open_target(receiver.url())
    receiver.replies = [Reply(), Reply(422, b"no"), Reply(503)]
    unsent = await target.publish(messages)
    # Published: finished, never sent again; refused: parked; from the 503 on: later.
    assert unsent[messages[1].at] == "HTTP 422: no"
    for message in messages[2:]:
        answer = unsent[message.at]
        assert isinstance(answer, BrokerUnavailable)
        assert answer.kind == "server_error"
    assert set(unsent) == {m.at for m in messages[1:]}
    assert await target.publish(messages[2:]) == {}
    await target.close()
    assert sent_ids(receiver) == ids(messages[:3] + messages[2:])


async def test_a_4xx_refuses_that_message_for_good_and_the_rest_go_on(receiver: Receiver) -> None:
    messages = made_messages(4)
    target = open_target(receiver.url())
    long_body = b"  invalid\n  order: " + b"x" * 300
    receiver.replies = [Reply(), Reply(422, long_body), Reply(400, b"")]
    refused = await target.publish(messages)
    await target.close()
    assert refused == {
        messages[1].at: "HTTP 422: " + ("invalid order: " + "x" * 300)[:200],
        messages[2].at: "HTTP 400: Bad Request",
    }
    assert sent_ids(receiver) == ids(messages)


async def test_a_4xx_in_mode_batch_refuses_every_message_of_it(receiver: Receiver) -> None:
    messages = made_messages(3)
    target = open_target(receiver.url("mode=batch"))
    receiver.replies = [Reply(400, b"bad batch")]
    assert await target.publish(messages) == {m.at: "HTTP 400: bad batch" for m in messages}
    await target.close()
    assert len(receiver.requests) == 1


@pytest.mark.parametrize(
    ("status", "kind", "said"),
    [
        (307, "refused", "a redirect to '{location}'; redirects are not followed"),
        (404, "missing", "HTTP 404: gone (the endpoint, not a message: check the URL"),
        (405, "missing", "HTTP 405: gone (the endpoint, not a message"),
        (410, "missing", "HTTP 410: gone (the endpoint, not a message"),
    ],
)
async def test_a_wrong_endpoint_parks_nothing_and_says_what_to_fix(
    receiver: Receiver, status: int, kind: str, said: str
) -> None:
    messages = made_messages(3)
    target = open_target(receiver.url())
    location = f"http://127.0.0.1:{receiver.port}/elsewhere"
    receiver.replies = [Reply(status, b"gone", (("Location", location),))]
    with pytest.raises(BrokerUnavailable) as raised:
        await target.publish(messages)
    await target.close()
    assert raised.value.kind == kind
    assert said.format(location=location) in raised.value.reason
    assert [r.path for r in receiver.requests] == ["/hooks/outbox"]  # one POST, not one each


async def test_a_429_retry_after_is_honoured_and_counts_nothing(receiver: Receiver) -> None:
    messages = made_messages(2)
    target = open_target(receiver.url())
    receiver.replies = [Reply(429, b"slow down", (("Retry-After", "1"),))]
    with pytest.raises(BrokerUnavailable) as first:
        await target.publish(messages)
    asked = time.monotonic()
    assert "HTTP 429: slow down" in first.value.reason
    # Called again at once (a short retry backoff): nothing is POSTed before the second.
    with pytest.raises(BrokerUnavailable) as waiting:
        await target.publish(messages)
    assert "Retry-After: 1" in waiting.value.reason
    assert len(receiver.requests) == 1
    while time.monotonic() - asked < 1:
        await asyncio.sleep(0.05)
    assert await target.publish(messages) == {}
    await target.close()
    assert len(receiver.requests) == 3


async def test_a_huge_answer_is_read_only_in_its_first_kilobytes(receiver: Receiver) -> None:
    target = open_target(receiver.url("timeout=5"))
    receiver.replies = [Reply(422, b"", huge=400 * 1024 * 1024)]
    started = time.monotonic()
    refused = await target.publish(made_messages(1))
    await target.close()
    assert time.monotonic() - started < 3
    (reason,) = refused.values()
    assert reason == "HTTP 422: " + "x" * 200
    receiver.released.set()
    assert receiver.wait_written() < 64 * 1024 * 1024  # the sender stopped long before


@pytest.mark.parametrize(
    ("query", "posts"),
    [("max_messages=2", [2, 2, 1]), ("max_bytes=700", None)],
)
async def test_mode_batch_is_split_as_the_url_bounds_it(
    receiver: Receiver, query: str, posts: list[int] | None
) -> None:
    messages = made_messages(5)
    target = open_target(receiver.url(f"mode=batch&{query}"))
    assert await target.publish(messages) == {}
    await target.close()
    arrays = [orjson.loads(request.body) for request in receiver.requests]
    sizes = [len(array) for array in arrays]
    assert [item["message_id"] for array in arrays for item in array] == ids(messages)
    if posts is not None:
        assert sizes == posts
    else:
        assert max(len(request.body) for request in receiver.requests) <= 700
        assert len(sizes) > 1


async def test_a_413_splits_the_batch_and_parks_only_what_is_too_large_alone(
    receiver: Receiver,
) -> None:
    messages = made_messages(4)
    target = open_target(receiver.url("mode=batch"))
    # 4 too large, then its halves: 2 too large, 1 + 1 fine; 2 fine. The last one alone too.
    too_large = Reply(413, b"")
    receiver.replies = [too_large, too_large, Reply(), Reply(), too_large, Reply(), too_large]
    unsent = await target.publish(messages)
    await target.close()
    assert unsent == {messages[3].at: "HTTP 413: Request Entity Too Large"}
    sizes = [len(orjson.loads(request.body)) for request in receiver.requests]
    assert sizes == [4, 2, 1, 1, 2, 1, 1]


async def test_the_client_logs_no_line_per_post(
    receiver: Receiver, caplog: pytest.LogCaptureFixture
) -> None:
    target = open_target(receiver.url())
    with caplog.at_level(logging.INFO):
        assert await target.publish(made_messages(3)) == {}
    await target.close()
    assert [record.getMessage() for record in caplog.records] == []


@pytest.mark.parametrize("status", [401, 403])
async def test_a_receiver_refusing_the_sender_parks_nothing(
    receiver: Receiver, status: int
) -> None:
    target = open_target(receiver.url())
    receiver.replies = [Reply(status, b"bad signature")]
    with pytest.raises(BrokerUnavailable) as raised:
        await target.publish(made_messages(2))
    await target.close()
    assert raised.value.kind == "refused"
    assert f"HTTP {status}: bad signature" in raised.value.reason


async def test_a_value_http_headers_cannot_carry_goes_percent_encoded(receiver: Receiver) -> None:
    odd = made_messages(1, key=" line\nbreak ", first_transaction=2000)
    target = open_target(receiver.url())
    assert await target.publish(odd) == {}
    await target.close()
    request = receiver.requests[-1]
    assert request.header(fields.ENCODED) == fields.PARTITION_KEY
    sent = {name: request.header(name) or "" for name in fields.header_fields(odd[0])}
    assert fields.read_header_fields(sent) == fields.metadata(odd[0])
    assert orjson.loads(request.body)["partition_key"] == " line\nbreak "


async def test_a_receiver_that_hangs_past_timeout_is_a_timeout(receiver: Receiver) -> None:
    messages = made_messages(2)
    target = open_target(receiver.url("timeout=0.3"))
    receiver.replies = [Reply(hang=True)]
    started = time.monotonic()
    with pytest.raises(BrokerUnavailable) as raised:
        await target.publish(messages)
    assert time.monotonic() - started < 2
    assert raised.value.kind == "timeout"
    assert "no answer within 0.3s" in raised.value.reason
    assert await target.publish(messages) == {}  # on a new connection
    await target.close()
    assert sent_ids(receiver) == ids(messages[:1] + messages)


def test_a_secret_env_naming_no_set_variable_is_refused_naming_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    variable = f"TEST_WEBHOOK_UNSET_{uuid.uuid4().hex.upper()}"
    monkeypatch.delenv(variable, raising=False)
    with pytest.raises(RelayUrlError, match=variable):
        open_target(f"http://127.0.0.1:9/hook?secret_env={variable}")
    monkeypatch.setenv(variable, "")
    with pytest.raises(RelayUrlError, match=variable):
        open_target(f"http://127.0.0.1:9/hook?secret_env={variable}")
    with pytest.raises(RelayUrlError, match="secret_env=''"):
        open_target("http://127.0.0.1:9/hook?secret_env=")


@pytest.mark.parametrize(
    ("query", "complaint"),
    [
        ("mode=stream", "mode='stream' must be message or batch"),
        ("colour=red", "unknown parameter 'colour'"),
        ("timeout=0", "timeout='0' must be a number from 0.1 to 600"),
        ("mode=batch&mode=message", "parameter 'mode' is given twice"),
        ("max_messages=10", "max_messages= and max_bytes= need mode=batch"),
        ("mode=batch&max_messages=1.5", "max_messages=1.5 must be a whole number"),
        ("mode=batch&max_bytes=10", "max_bytes='10' must be a number from 64"),
    ],
)
def test_bad_parameters_are_refused(query: str, complaint: str) -> None:
    with pytest.raises(RelayUrlError, match=re.escape(complaint)):
        open_target(f"http://127.0.0.1:9/hook?{query}")


async def test_the_secret_and_password_are_never_shown(
    receiver: Receiver, secret: tuple[str, str]
) -> None:
    variable, value = secret
    password = f"pw-{uuid.uuid4().hex}"
    url = receiver.url(f"secret_env={variable}&timeout=0.3").replace("//", f"//relay:{password}@")
    target = open_target(url)
    shown = [repr(target), target.name]
    receiver.replies = [Reply(500, b"down"), Reply(401), Reply(hang=True), Reply(418, b"teapot")]
    for _ in range(3):
        with pytest.raises(BrokerUnavailable) as raised:
            await target.publish(made_messages(1))
        shown += [str(raised.value), repr(raised.value), raised.value.reason]
    shown += [str(unsent) for unsent in (await target.publish(made_messages(1))).values()]
    await target.close()
    closed = open_target(url.replace(f"127.0.0.1:{receiver.port}", "127.0.0.1:1"))
    with pytest.raises(BrokerUnavailable) as raised:
        await closed.publish(made_messages(1))
    shown += [str(raised.value), raised.value.reason, repr(closed)]
    assert "***" in target.name
    assert [text for text in shown if value in text or password in text] == []
    # The password went where it belongs: basic authentication.
    credentials = base64.b64encode(f"relay:{password}".encode()).decode()
    assert receiver.requests[0].header("Authorization") == f"Basic {credentials}"
