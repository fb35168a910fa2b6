"""Publish to NATS JetStream: `nats://[user:pass@]host:port?subject=TEMPLATE[&stream=NAME]`.

Each message is one JetStream message on the subject its template renders: the body is the
payload's JSON text, the headers are every field of `relays.fields.header_fields` (a value
nats-py would fold or strip goes percent-encoded, named in outbox-encoded) plus
`Nats-Msg-Id`, `relays.fields.dedup_id`: the publication and the message id, exact. JetStream
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
import string
from collections.abc import Mapping, Sequence

import nats.errors
import nats.js.errors
import orjson
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js.api import Header, StorageType

from outbox.positions import Position
from poller.message import Message
from relays import fields
from relays.target import BrokerUnavailable
from relays.target_url import RelayUrlError, TargetUrl
from relays.templates import Template, TemplateError

DEFAULT_PORT = 4222
DEFAULT_STREAM = "OUTBOX"
DUPLICATE_WINDOW = 2 * 60 * 60.0
"""Seconds a declared stream remembers Msg-Ids. A re-publish is de-duplicated only within
it, so it must outlast the longest gap between a first attempt and its retry: a broker or
database outage plus the relay's restart. JetStream's default of two minutes does not; the
cost is the server's memory for the ids of two hours of messages."""

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
        self._declare = declare
        self._declared = False
        self._nc: Client | None = None
        self._reported: Exception | None = None
        """The last error the client reported on its own (a permissions violation makes the
        server drop a publish silently), named when a batch then times out."""

    @property
    def name(self) -> str:
        return self._url.masked

    async def publish(self, messages: Sequence[Message]) -> Mapping[Position, str]:
        try:
            return await self._publish(messages)
        except BrokerUnavailable:
            # A fresh connection for the retry: nothing of this batch's replies can linger.
            await self.close()
            raise

    async def close(self) -> None:
        nc, self._nc = self._nc, None
        if nc is not None and not nc.is_closed:
            # Closing flushes to the socket: bounded, for a server that stopped reading.
            with contextlib.suppress(OSError, nats.errors.Error, TimeoutError):
                async with asyncio.timeout(_CLOSE_SECONDS):
                    await nc.close()

    async def _publish(self, messages: Sequence[Message]) -> dict[Position, str]:
        refused: dict[Position, str] = {}
        if not messages:
            return refused
        nc = await self._connection()
        outgoing: list[_Prepared] = []
        for message in messages:
            subject = self._subject.render(message)
            headers = fields.header_fields(message)
            headers["Nats-Msg-Id"] = fields.dedup_id(message, self._generation)
            body = fields.payload(message)
            problem = _subject_problem(subject) or _size_problem(headers, body, nc.max_payload)
            if problem:
                refused[message.at] = f"NATS: subject {subject!r}: {problem}"
            else:
                outgoing.append((message, subject, headers, body))
        if not outgoing:
            return refused
        answers = await self._send(nc, outgoing)
        for (message, subject, _, _), answer in zip(outgoing, answers, strict=True):
            error = _error_in(answer, subject)
            if error is None:
                continue
            code, description = error
            if code in _REFUSED_FOR_GOOD:
                refused[message.at] = f"NATS refused subject {subject!r}: {description}"
            else:
                raise BrokerUnavailable(
                    "server_error", f"NATS: the stream refused subject {subject!r}: {description}"
                )
        return refused

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
            return self._nc
        await self.close()
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
        if self._declare and not self._declared:
            await self._declare_stream(self._nc)
            self._declared = True
        return self._nc

    async def _declare_stream(self, nc: Client) -> None:
        """Creates the stream unless one already captures the template's subjects."""
        subjects = _captured_subjects(self._subject.text)
        js = nc.jetstream(timeout=self._timeout)
        try:
            try:
                await js.find_stream_name_by_subject(subjects)
            except nats.js.errors.NotFoundError:
                await js.add_stream(
                    name=self._stream,
                    subjects=[subjects],
                    storage=StorageType.FILE,
                    duplicate_window=DUPLICATE_WINDOW,
                )
        except nats.js.errors.APIError as error:
            raise BrokerUnavailable(
                "missing",
                f"NATS: cannot create stream {self._stream!r} for subjects {subjects!r}:"
                f" {error.description} (JetStream error {error.err_code})",
            ) from None
        except TimeoutError:
            raise BrokerUnavailable(
                "timeout", f"NATS {self._address}: no JetStream API reply to declare the stream"
            ) from None
        except (OSError, nats.errors.Error) as error:
            raise BrokerUnavailable("connection", f"NATS {self._address}: {_text(error)}") from None

    async def _report(self, error: Exception) -> None:
        # The default callback logs a traceback per error; publish raises what matters.
        self._reported = error

    def _last_report(self) -> str:
        return f" (the client reported: {_text(self._reported)})" if self._reported else ""


def _error_in(answer: Msg, subject: str) -> tuple[int | None, str] | None:
    """None when JetStream stored the message (or already had it), else its error code and
    description; raises BrokerUnavailable when no stream captures the subject."""
    if answer.headers and answer.headers.get(Header.STATUS) == _NO_RESPONDERS:
        raise BrokerUnavailable(
            "missing",
            f"NATS: no JetStream stream captures subject {subject!r} (create one, or run the"
            " relay with --declare)",
        )
    try:
        reply = orjson.loads(answer.data)
    except orjson.JSONDecodeError:
        reply = None
    if not isinstance(reply, dict) or not ("error" in reply or "seq" in reply):
        raise BrokerUnavailable(
            "server_error",
            f"NATS: the reply to subject {subject!r} is not a JetStream acknowledgement"
            " (is something other than a stream answering on it?)",
        )
    error = reply.get("error")
    if error is None:
        return None
    code = error.get("err_code")
    return code, f"{error.get('description')} (JetStream error {code})"


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


def _captured_subjects(template: str) -> str:
    """The stream subject that covers every subject `template` renders: a token holding a
    field becomes `*`, and the last one `>`, as a message type may itself contain dots."""
    tokens = template.split(".")
    last = len(tokens) - 1
    captured = []
    for index, token in enumerate(tokens):
        if any(field is not None for _, field, _, _ in string.Formatter().parse(token)):
            captured.append(">" if index == last else "*")
        else:
            captured.append(token.format())  # a literal token, with {{ and }} unescaped
    return ".".join(captured)
