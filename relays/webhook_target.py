"""POSTs to an HTTP endpoint (a webhook): `http(s)://[user:pass@]host:port/path?...`.

Parameters: `mode=message` (the default: one POST per message, in order, each answered before
the next is sent, so a receiver sees each key's messages in order) or `mode=batch` (one POST
whose body is a JSON array of the batch's messages); `secret_env=NAME`, the environment
variable holding the signing secret; `timeout=S`, the seconds one POST may take (default 10).
They are the relay's own: the POST goes to `scheme://host:port/path`, without the query. A
user and password in the URL are sent as HTTP basic authentication.

A message's body is the JSON object {"message_id", "message_type", "publication",
"partition_key" (null when keyless), "position" ("TX:POS"), "appended_at" (ISO 8601),
"headers", "data"}; Content-Type is application/json. With mode=message the fields of
`relays.fields.header_fields` go as headers too (outbox-message-id and the rest, UTF-8; a
value HTTP cannot carry, with a line break or white space at an end, percent-encoded and
named in outbox-encoded).

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

Answers: 2xx is published. 5xx, 408, 429, no answer within timeout= and network errors make
the batch wait and be sent again (BrokerUnavailable); so do 401, 403 and 407, which refuse
the sender, not a message. Any other answer (a 4xx, or a 3xx: redirects are not followed)
refuses the message for good ("HTTP 422: <the answer's first 200 characters>"), or with
mode=batch every message of the batch; the relay parks it.

Delivery is at least once. A batch sent again after a failure in mode=message skips the
messages this process already had answered: a receiver failing now and then must not have
the whole batch re-sent each time, or a large batch might never get through. After a restart
they are sent again, so a receiver drops duplicates by message_id (also the
outbox-message-id header).
"""

import asyncio
import contextlib
import hashlib
import hmac
import os
import time
from collections.abc import Mapping, Sequence

import httpx
import orjson

from outbox.positions import Position
from poller.message import Message
from relays import fields
from relays.target import BrokerUnavailable
from relays.target_url import RelayUrlError, TargetUrl

_REASON_LENGTH = 200
"""How much of a refusing answer's body its reason quotes."""

_SENDER_REFUSED = frozenset({401, 403, 407})
"""The receiver refuses the relay (its password or signing secret), not the message: parking
every message because a secret was rotated on one side first would be wrong."""

_NOT_NOW = frozenset({408, 429})


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
        self._client: httpx.AsyncClient | None = None
        self._answered: dict[tuple[str, Position], str | None] = {}
        """mode=message: the messages answered since the last publish that returned, each
        with its refusal (None when published), for the same batch coming again."""

    @property
    def name(self) -> str:
        return self._url.masked

    async def publish(self, messages: Sequence[Message]) -> Mapping[Position, str]:
        if self._mode == "batch":
            if not messages:
                return {}
            refusal = await self._post(orjson.dumps([_body(m) for m in messages]), {})
            return {} if refusal is None else {message.at: refusal for message in messages}
        refused: dict[Position, str] = {}
        for message in messages:
            # The publication too: two subscriptions may share one target and one outbox.
            key = (message.publication, message.at)
            if key not in self._answered:
                self._answered[key] = await self._send(message)
            refusal = self._answered[key]
            if refusal is not None:
                refused[message.at] = refusal
        self._answered.clear()
        return refused

    async def _send(self, message: Message) -> str | None:
        headers = {
            field.encode(): value.encode() for field, value in fields.header_fields(message).items()
        }
        return await self._post(orjson.dumps(_body(message)), headers)

    async def _post(self, body: bytes, headers: dict[bytes, bytes]) -> str | None:
        """POST `body`: None when published, the reason when refused for good."""
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
                response = await self._client.post(self._endpoint, content=body, headers=headers)
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
        status = response.status_code
        if 200 <= status < 300:
            return None
        if 300 <= status < 400:
            location = response.headers.get("location", "nowhere")
            return f"HTTP {status}: redirects to {location!r}, and redirects are not followed"
        answer = f"HTTP {status}: {_line(response.text)[:_REASON_LENGTH] or response.reason_phrase}"
        if status >= 500 or status in _NOT_NOW:
            raise BrokerUnavailable("server_error", f"{self._endpoint} answered {answer}")
        if status in _SENDER_REFUSED:
            raise BrokerUnavailable("refused", f"{self._endpoint} answered {answer}")
        return answer

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
