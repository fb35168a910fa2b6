"""Publish to NATS JetStream: `nats://[user:pass@]host:port?subject=TEMPLATE[&stream=NAME]`.

Each message is one JetStream message on the subject its template renders: the body is the
payload's JSON text, the headers are every field of `outbox_relays.fields.header_fields`, the
message's own headers each as a header of its own (a value nats-py would fold or strip goes
percent-encoded, named in outbox-encoded; a name as fields.NATS_NAMES says) plus
`Nats-Msg-Id`, `outbox_relays.fields.dedup_id`: the publication and the message id, exact. JetStream
drops a message whose Msg-Id it has stored within the stream's duplicate window, so a batch
the relay publishes again after a failure adds only what is not there yet.

A batch goes out as plain publishes on the one connection, each with its own reply subject,
and the acknowledgements are collected together: the server stores one connection's messages
in the order they arrive, so per-key order holds without a round trip per message.
nats-py's own `publish_async` is not used: in 2.16 an error reply (a message over the
stream's size limit) raises inside its reply handler and never reaches the future, so that
message would time out forever instead of being parked.
"""

import asyncio
import contextlib
import re
from collections.abc import Mapping, Sequence

import nats.errors
import nats.js.errors
import orjson
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js.api import Header

from outbox.positions import Position
from outbox_relays import cloud_events, fields
from outbox_relays.nats_streams import StreamKeeper
from outbox_relays.target import BrokerUnavailable, Unsent, whole_or_each
from outbox_relays.target_url import RelayUrlError, TargetUrl
from outbox_relays.templates import Template, TemplateError
from poller.message import Message

DEFAULT_PORT = 4222
DEFAULT_STREAM = "OUTBOX"
_CONNECT_SECONDS = 2
_CLOSE_SECONDS = 2.0
# JetStream errors that the same message would get on every attempt: message, or its
# headers, over the stream's size limits. Every other error is about the stream's state.
_REFUSED_FOR_GOOD = frozenset({10054, 10097})
_NO_RESPONDERS = "503"
_NAME_FORBIDS = frozenset(">*. /\\\t\r\n")
_WHITESPACE = re.compile(r"\s")

# A message ready to go: it, its subject, headers and body.
_Prepared = tuple[Message, str, dict[str, str], bytes]


class NatsTarget:
    def __init__(self, url: TargetUrl, *, declare: bool) -> None:
        self._url = url
        self._address = url.address(DEFAULT_PORT)
        try:
            self._subject = Template("subject", url.required("subject"))
        except TemplateError as error:
            raise RelayUrlError(f"--to {url.masked}: {error}") from None
        sample = self._subject.text.format(publication="p", message_type="t", partition_key="k")
        problem = _subject_problem(sample)
        if problem:
            raise RelayUrlError(f"--to {url.masked}: subject={self._subject.text!r} {problem}")
        self._stream = url.parameters.get("stream", DEFAULT_STREAM)
        if not self._stream or _NAME_FORBIDS.intersection(self._stream):
            raise RelayUrlError(
                f"--to {url.masked}: stream={self._stream!r} is not a stream name (no spaces,"
                " dots, slashes, * or >)"
            )
        self._timeout = url.number("timeout", 10, 0.1, 600)
        self._generation = url.dedup_generation()
        self._cloud_events = url.cloud_events()
        self._streams = StreamKeeper(
            self._stream, self._subject.text, self._address, declare=declare
        )
        self._prepared = False
        """Whether this connection found JetStream and the stream (declared it, with
        --declare); False again after a publish found the stream missing."""
        self._nc: Client | None = None
        self._reported: Exception | None = None
        """The last error the client reported on its own (a permissions violation makes the
        server drop a publish silently), named when a batch then times out."""

    @property
    def name(self) -> str:
        return self._url.masked

    async def publish(self, messages: Sequence[Message]) -> Mapping[Position, Unsent]:
        try:
            return await self._publish(messages)
        except BrokerUnavailable:
            # A fresh connection for the retry: nothing of this batch's replies can linger.
            await self.close()
            raise

    async def check(self) -> None:
        await self._connection()  # JetStream asked, the stream found (or declared), checked

    async def close(self) -> None:
        nc, self._nc = self._nc, None
        if nc is not None and not nc.is_closed:
            # Closing flushes to the socket: bounded, for a server that stopped reading.
            with contextlib.suppress(OSError, nats.errors.Error, TimeoutError):
                async with asyncio.timeout(_CLOSE_SECONDS):
                    await nc.close()

    async def _publish(self, messages: Sequence[Message]) -> dict[Position, Unsent]:
        unsent: dict[Position, Unsent] = {}
        if not messages:
            return unsent
        nc = await self._connection()
        outgoing: list[_Prepared] = []
        for message in messages:
            subject = self._subject.render(message)
            own = None
            if self._cloud_events:
                own = cloud_events.binary_headers(
                    message, self._generation, percent_encoded=True, content_type=True
                )
            headers = fields.header_fields(message, fields.NATS_NAMES, own)
            headers["Nats-Msg-Id"] = fields.dedup_id(message, self._generation)
            body = fields.payload(message)
            problem = _subject_problem(subject) or _size_problem(headers, body, nc.max_payload)
            if problem:
                unsent[message.at] = f"NATS: subject {subject!r}: {problem}"
            else:
                outgoing.append((message, subject, headers, body))
        if not outgoing:
            return unsent
        answers = await self._send(nc, outgoing)
        uncaptured: list[tuple[Message, str]] = []
        for (message, subject, _, _), answer in zip(outgoing, answers, strict=True):
            if answer.headers and answer.headers.get(Header.STATUS) == _NO_RESPONDERS:
                uncaptured.append((message, subject))
                continue
            outcome = _outcome(answer, subject)
            if outcome is not None:
                unsent[message.at] = outcome
        if uncaptured:
            await self._not_captured(nc, uncaptured, unsent)
        return whole_or_each(messages, unsent)

    async def _not_captured(
        self, nc: Client, uncaptured: list[tuple[Message, str]], unsent: dict[Position, Unsent]
    ) -> None:
        """No stream answered for these subjects. When the relay's stream exists, it does not
        capture them (a field's value with a dot in a token the stream matches with `*`):
        those messages can never be stored, and are parked, not the whole relay stalled.
        Otherwise the stream is missing: an outage (declared again, with --declare)."""
        exists = await self._streams.exists(nc.jetstream(timeout=self._timeout))
        if not exists:
            self._prepared = False  # found again, or declared, at the next attempt
        for message, subject in uncaptured:
            if exists:
                unsent[message.at] = (
                    f"NATS: stream {self._stream!r} does not capture subject {subject!r}"
                    f" (it captures {self._streams.subjects!r}, or less; a field's value with a"
                    " dot makes more tokens: put that field last in subject=)"
                )
            else:
                unsent[message.at] = self._streams.missing(subject)

    async def _send(self, nc: Client, outgoing: list[_Prepared]) -> list[Msg]:
        """Publishes in order and returns each one's reply, in the same order."""
        self._reported = None
        inbox = nc.new_inbox()
        answers: dict[int, Msg] = {}
        try:
            async with asyncio.timeout(self._timeout):
                replies = await nc.subscribe(f"{inbox}.*")
                for number, (_, subject, headers, body) in enumerate(outgoing):
                    await nc.publish(subject, body, reply=f"{inbox}.{number}", headers=headers)
                # The iteration ends early only when the connection closes.
                async for reply in replies.messages:
                    answers[int(reply.subject.rpartition(".")[2])] = reply
                    if len(answers) == len(outgoing):
                        break
                if len(answers) == len(outgoing):
                    await replies.unsubscribe()
        except TimeoutError:
            raise BrokerUnavailable(
                "timeout",
                f"NATS {self._address}: {len(outgoing) - len(answers)} of {len(outgoing)}"
                f" messages unconfirmed after {self._timeout:g} s{self._last_report()}",
            ) from None
        except (OSError, nats.errors.Error) as error:
            raise BrokerUnavailable("connection", f"NATS {self._address}: {_text(error)}") from None
        if len(answers) < len(outgoing):
            raise BrokerUnavailable(
                "connection",
                f"NATS {self._address}: connection lost before the server confirmed the batch"
                f"{self._last_report()}",
            )
        return [answers[number] for number in range(len(outgoing))]

    async def _connection(self) -> Client:
        if self._nc is not None and self._nc.is_connected:
            await self._prepare(self._nc)
            return self._nc
        await self.close()
        self._prepared = False
        url = self._url
        self._reported = None
        try:
            # No reconnecting inside the client: a lost connection fails the batch at once,
            # and the next publish connects afresh. The first connect still loops over its
            # server list; 1 is the fewest tries it takes to stop (0 means forever): two
            # attempts, back to back. The client is kept even when connecting fails: a refused
            # login leaves its socket open, for publish's close() to release.
            self._nc = Client()
            await self._nc.connect(
                servers=[self._address],
                user=url.username if url.password else None,
                password=url.password,
                token=url.username if not url.password else None,
                connect_timeout=_CONNECT_SECONDS,
                allow_reconnect=False,
                max_reconnect_attempts=1,
                reconnect_time_wait=0,
                error_cb=self._report,
            )
        except (OSError, TimeoutError, nats.errors.Error) as error:
            # The client's own report names the first failure (connection refused) where the
            # error raised is only "no servers available".
            said = _text(self._reported or error)
            # nats-py raises the server's -ERR as a plain Error: only its text tells a refused
            # login apart.
            if "authorization violation" in said.lower():
                raise BrokerUnavailable(
                    "refused",
                    f"NATS {self._address} refused the login (check the user name and password)",
                ) from None
            raise BrokerUnavailable(
                "connection", f"NATS {self._address}: cannot connect: {said}"
            ) from None
        await self._prepare(self._nc)
        return self._nc

    async def _prepare(self, nc: Client) -> None:
        if not self._prepared:
            await self._streams.prepare(nc.jetstream(timeout=self._timeout))
            self._prepared = True

    async def _report(self, error: Exception) -> None:
        # The default callback logs a traceback per error; publish raises what matters.
        self._reported = error

    def _last_report(self) -> str:
        return f" (the client reported: {_text(self._reported)})" if self._reported else ""


def _outcome(answer: Msg, subject: str) -> Unsent | None:
    """None when JetStream stored the message (or already had it); else why not: for good
    (over a size limit; something other than a stream answering on the subject), or not now
    (the stream's state)."""
    try:
        reply = orjson.loads(answer.data)
    except orjson.JSONDecodeError:
        reply = None
    if not isinstance(reply, dict) or not ("error" in reply or "seq" in reply):
        return (
            f"NATS: something other than a JetStream stream answers on subject {subject!r} (a"
            " service subscribed to it?), so no stream can store it"
        )
    error = reply.get("error")
    if error is None:
        return None
    code = error.get("err_code")
    description = f"{error.get('description')} (JetStream error {code})"
    if code in _REFUSED_FOR_GOOD:
        return f"NATS refused subject {subject!r}: {description}"
    return BrokerUnavailable(
        "server_error", f"NATS: the stream refused subject {subject!r}: {description}"
    )


def _text(error: BaseException) -> str:
    return str(error) or type(error).__name__


def _subject_problem(subject: str) -> str | None:
    if _WHITESPACE.search(subject):
        return "contains white space"
    tokens = subject.split(".")
    if "" in tokens:
        return "has an empty token (a keyless message's {partition_key}?)"
    if "*" in tokens or ">" in tokens:
        return "has a wildcard token"
    return None


def _size_problem(headers: dict[str, str], body: bytes, max_payload: int) -> str | None:
    # The server closes the connection on a message over its max_payload, headers included,
    # so such a message would fail every attempt as a lost connection: refused before sending.
    size = len(body) + len("NATS/1.0\r\n\r\n")
    size += sum(len(name) + len(value.encode()) + len(": \r\n") for name, value in headers.items())
    if size > max_payload:
        return f"message of {size} bytes is over the server's max_payload of {max_payload}"
    return None
