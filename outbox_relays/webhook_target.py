"""POSTs to an HTTP endpoint (a webhook): `http(s)://[user:pass@]host:port/path?...`.

Parameters: `mode=message` (the default: one POST per message, in order, each answered before
the next is sent, so a receiver sees each key's messages in order) or `mode=batch` (a POST
whose body is a JSON array of the batch's messages, in order); with mode=batch,
`max_messages=N` and `max_bytes=N` bound one POST's messages and body (a relay batch goes as
several POSTs, in order), and an HTTP 413 splits the POST in halves (one message that the
receiver refuses alone as too large is parked); `secret_env=NAME`, the environment variable
holding the signing secret; `timeout=S`, the seconds one POST may take (default 10).
They are the relay's own: the POST goes to `scheme://host:port/path`, without the query. A
user and password in the URL are sent as HTTP basic authentication.

A message's body is the JSON object {"message_id", "message_type", "publication",
"partition_key" (null when keyless), "position" ("TX:POS"), "appended_at" (ISO 8601),
"headers", "data"}; Content-Type is application/json. With mode=message the fields of
`outbox_relays.fields.header_fields` go as headers too (outbox-message-id and the rest, and the
message's own headers each as an HTTP header; a value HTTP cannot carry as it is, with a
line break, white space at an end or any character beyond printable ASCII, which receivers
read as Latin-1, percent-encoded as UTF-8 and named in outbox-encoded; a name as
fields.HTTP_NAMES says), so every header value sent is ASCII.

With secret_env= every POST is signed: `Outbox-Timestamp` is the Unix time in whole seconds,
and `Outbox-Signature` is `sha256=` followed by the hex HMAC-SHA256, keyed with the secret's
UTF-8 bytes, of the timestamp's digits, a dot, and the body's raw bytes. A receiver recomputes
it over the body as received (before parsing it) and rejects a timestamp too far from its
clock, so a captured request cannot be replayed later. In Python (`headers` looked up without
regard to case, as web frameworks do)::

    import hashlib, hmac, time
    def verify(secret: bytes, headers, body: bytes, max_age: float = 300) -> bool:
        stamp = headers["Outbox-Timestamp"]
        mac = hmac.new(secret, f"{stamp}.".encode() + body, hashlib.sha256).hexdigest()
        fresh = abs(time.time() - int(stamp)) <= max_age
        return fresh and hmac.compare_digest(headers["Outbox-Signature"], f"sha256={mac}")

Answers: see `outbox_relays.webhook_answers` (2xx published; 5xx, 408, 429, 401, 403, 407, a 3xx,
404, 405 and 410 wait, parking nothing; a 429's or 503's Retry-After is honoured; any other
4xx parks). Only the first few KB of an answer are read.

Delivery is at least once. What the receiver answered is never sent again by this process
(each message has its own outcome: the first that must wait holds the rest of the batch), so
a receiver failing now and then still gets a large batch through. After a crash or restart
a message may come again, so a receiver drops duplicates by message_id (also the
outbox-message-id header).
"""

import asyncio
import contextlib
import hashlib
import hmac
import logging
import os
import time
from collections.abc import Mapping, Sequence

import httpx
import orjson

from outbox.positions import Position
from outbox_relays import cloud_events, fields, webhook_answers
from outbox_relays.target import BrokerUnavailable, Unsent, whole_or_each
from outbox_relays.target_url import RelayUrlError, TargetUrl
from poller.message import Message

# Its per-request INFO line would be one line per message at the default log level.
logging.getLogger("httpx").setLevel(logging.WARNING)


class WebhookTarget:
    """POSTs each message (or each batch) to one URL and reads the answer's status."""

    def __init__(self, url: TargetUrl, *, declare: bool) -> None:
        del declare  # an HTTP receiver has nothing the relay could declare
        self._url = url
        self._mode = url.parameters.get("mode", "message")
        if self._mode not in ("message", "batch"):
            raise RelayUrlError(f"--to {url.masked}: mode={self._mode!r} must be message or batch")
        self._secret = _secret(url)
        self._timeout = url.number("timeout", 10, 0.1, 600)
        self._endpoint = url.address(443 if url.scheme == "https" else 80) + (url.path or "/")
        try:
            httpx.URL(self._endpoint)
        except httpx.InvalidURL as error:
            raise RelayUrlError(f"--to {url.masked}: {error}") from None
        self._auth = httpx.BasicAuth(url.username, url.password or "") if url.username else None
        self._max_messages = url.whole_number("max_messages", 0, 1, 1_000_000)
        self._max_bytes = url.whole_number("max_bytes", 0, 64, 2**40)
        if self._mode != "batch" and (self._max_messages or self._max_bytes):
            raise RelayUrlError(f"--to {url.masked}: max_messages= and max_bytes= need mode=batch")
        self._cloud_events = url.cloud_events()
        if self._cloud_events and self._mode == "batch":
            raise RelayUrlError(
                f"--to {url.masked}: format=cloudevents takes mode=message (binary mode: one"
                " event per POST, the message's own headers as HTTP headers)"
            )
        self._client: httpx.AsyncClient | None = None
        self._not_before = 0.0
        """time.monotonic() before which nothing is POSTed (a Retry-After)."""
        self._waiting = ""
        """The Retry-After that holds the relay, for the reason it gives meanwhile."""

    @property
    def name(self) -> str:
        return self._url.masked

    async def publish(self, messages: Sequence[Message]) -> Mapping[Position, Unsent]:
        unsent: dict[Position, Unsent] = {}
        groups = self._batches(messages, unsent) if self._mode == "batch" else self._each(messages)
        for number, group in enumerate(groups):
            try:
                await self._deliver(group, unsent)
            except BrokerUnavailable as error:
                # Nothing after it goes before it: the rest of the batch waits too.
                for later in groups[number:]:
                    for message, _ in later:
                        unsent[message.at] = error
                break
        return whole_or_each(messages, unsent)

    def _each(self, messages: Sequence[Message]) -> list[list[tuple[Message, bytes]]]:
        if self._cloud_events:  # binary mode: the body is the event's data
            return [[(message, fields.payload(message))] for message in messages]
        return [[(message, orjson.dumps(_body(message)))] for message in messages]

    def _batches(
        self, messages: Sequence[Message], unsent: dict[Position, Unsent]
    ) -> list[list[tuple[Message, bytes]]]:
        """The batch as POSTs within max_messages and max_bytes, in order; a message over
        max_bytes alone is refused for good."""
        groups: list[list[tuple[Message, bytes]]] = []
        size = 0
        for message in messages:
            body = orjson.dumps(_body(message))
            if self._max_bytes and len(body) + 2 > self._max_bytes:
                unsent[message.at] = (
                    f"its body of {len(body)} bytes is over max_bytes={self._max_bytes}"
                )
                continue
            full = groups and (
                (self._max_messages and len(groups[-1]) >= self._max_messages)
                or (self._max_bytes and size + len(body) + 1 > self._max_bytes)
            )
            if not groups or full:
                groups.append([])
                size = 1
            groups[-1].append((message, body))
            size += len(body) + 1
        return groups

    async def _deliver(
        self, group: list[tuple[Message, bytes]], unsent: dict[Position, Unsent]
    ) -> None:
        """POST one message (mode=message) or one array; halve an array on HTTP 413."""
        if self._mode == "message":
            message, body = group[0]
            own = None
            if self._cloud_events:
                own = cloud_events.binary_headers(message, percent_encoded=True, content_type=False)
            headers = {
                field.encode(): value.encode("ascii")  # header_fields encoded the rest
                for field, value in fields.header_fields(message, fields.HTTP_NAMES, own).items()
            }
            if (refusal := await self._post(body, headers)) is not None:
                unsent[message.at] = refusal
            return
        status, refusal = await self._post_status(b"[" + b",".join(b for _, b in group) + b"]")
        if status == webhook_answers.TOO_LARGE and len(group) > 1:
            half = len(group) // 2
            await self._deliver(group[:half], unsent)
            await self._deliver(group[half:], unsent)
            return
        if refusal is not None:
            for message, _ in group:
                unsent[message.at] = refusal

    async def _post(self, body: bytes, headers: dict[bytes, bytes] | None = None) -> str | None:
        return (await self._post_status(body, headers))[1]

    async def _post_status(
        self, body: bytes, headers: dict[bytes, bytes] | None = None
    ) -> tuple[int, str | None]:
        """POST `body`: its status, and None when published or the reason when refused for
        good; raises BrokerUnavailable for an answer that is not about the message."""
        if time.monotonic() < self._not_before:
            raise BrokerUnavailable(
                "server_error", f"{self._endpoint} asked the relay to wait: {self._waiting}"
            )
        headers = dict(headers or {})
        headers[b"content-type"] = b"application/json"
        if self._secret is not None:
            # Signed at each attempt, so a retry carries a fresh timestamp.
            stamp = str(int(time.time())).encode()
            mac = hmac.new(self._secret, stamp + b"." + body, hashlib.sha256).hexdigest()
            headers[b"outbox-timestamp"] = stamp
            headers[b"outbox-signature"] = b"sha256=" + mac.encode()
        if self._client is None:
            # One bound, asyncio's, for the whole POST: httpx's own apply per read or write.
            self._client = httpx.AsyncClient(auth=self._auth, timeout=None)
        try:
            async with asyncio.timeout(self._timeout):
                request = self._client.build_request(
                    "POST", self._endpoint, content=body, headers=headers
                )
                response = await self._client.send(request, stream=True)
                try:
                    start = await webhook_answers.read_start(response)
                finally:
                    await response.aclose()
        except TimeoutError as error:
            await self.close()
            raise BrokerUnavailable(
                "timeout", f"{self._endpoint}: no answer within {self._timeout:g}s"
            ) from error
        except (httpx.HTTPError, OSError) as error:
            await self.close()
            raise BrokerUnavailable(
                "connection", f"{self._endpoint}: {type(error).__name__}: {_line(str(error))}"
            ) from error
        now = time.monotonic()
        self._not_before = webhook_answers.retry_after(response, now) or 0.0
        if self._not_before > now:
            until = time.localtime(time.time() + self._not_before - now)
            said = response.headers.get("retry-after", "")
            self._waiting = f"HTTP {response.status_code}, Retry-After: {said} (until"
            self._waiting += f" {time.strftime('%H:%M:%S', until)}; nothing is POSTed before)"
        return response.status_code, webhook_answers.meaning(self._endpoint, response, start)

    async def check(self) -> None:
        """Nothing to check without POSTing: a receiver's settings show in its answers."""

    async def close(self) -> None:
        """Drop the connections; the next publish opens new ones."""
        client, self._client = self._client, None
        if client is not None:
            # The connections are being dropped anyway: a failure to close one changes nothing.
            with contextlib.suppress(httpx.HTTPError, OSError):
                await client.aclose()


def _secret(url: TargetUrl) -> bytes | None:
    """The signing secret secret_env= names, read once: its name may be shown, never it."""
    variable = url.parameters.get("secret_env")
    if variable is None:
        return None
    value = os.environ.get(variable) if variable else None
    if not value:
        raise RelayUrlError(
            f"--to {url.masked}: secret_env={variable!r} names no environment variable that"
            " is set and not empty"
        )
    return value.encode()


def _body(message: Message) -> dict[str, object]:
    # Fragments: the payload and headers go as the JSON texts PostgreSQL gave, not re-encoded.
    return {
        "message_id": fields.message_id(message),
        "message_type": message.message_type,
        "publication": message.publication,
        "partition_key": message.partition_key,
        "position": str(message.at),
        "appended_at": message.appended_at.isoformat(),
        "headers": orjson.Fragment(message.headers_text),
        "data": orjson.Fragment(message.data_text),
    }


def _line(text: str) -> str:
    """`text` on one line, for a reason that a log shows as one."""
    return " ".join(text.split())
