"""Publishes to a RabbitMQ exchange, with publisher confirms: `amqp://` and `amqps://` URLs.

Each message goes to the exchange and routing key its templates render, persistent, with
mandatory=True so an unroutable message comes back instead of being dropped; its headers are
the relay's fields and the message's own headers (`outbox_relays.fields`, names as AMQP_NAMES
says; a header name over AMQP's 255 bytes parks the message). A batch is written
in order on one channel and its confirms are awaited together; a message counts as published
only once the broker confirmed it. Each message has its own answer: one nacked (a full queue
with x-overflow=reject-publish) or returned is sent again later, what the broker confirmed
never is.

RabbitMQ has no broker-side de-duplication: a batch published again after a failure arrives
again (at-least-once). Every message carries its outbox id as the AMQP message_id, so a consumer
drops the duplicates.
"""

import asyncio
import contextlib
import logging
import re
import urllib.parse
from collections.abc import Mapping, Sequence

import aio_pika
import aio_pika.abc
import aiormq
from aio_pika.exceptions import (
    AMQPError,
    AuthenticationError,
    ChannelClosed,
    ChannelNotFoundEntity,
    ChannelPreconditionFailed,
    DeliveryError,
    InvalidFrameError,
    ProbableAuthenticationError,
    PublishError,
)
from aiormq.exceptions import ChannelAccessRefused
from pamqp import commands

from outbox.database_url import mask_password
from outbox.positions import Position
from outbox_relays import amqp_batches, cloud_events, fields
from outbox_relays.target import BrokerUnavailable, Unsent, whole_or_each
from outbox_relays.target_url import RelayUrlError, TargetUrl
from outbox_relays.templates import Template, TemplateError
from poller.message import Message

log = logging.getLogger(__name__)

_SHORT_STRING = 255
"""AMQP 0-9-1 short strings (exchange, routing key, message_id, type) hold at most 255 bytes."""

_BROKER_ERRORS = (AMQPError, OSError, RuntimeError, EOFError)
"""What aio-pika raises for broker and network trouble (a RuntimeError when a connection or
channel it uses has closed, ChannelInvalidStateError among them)."""

_TOO_LARGE = re.compile(r"message size \d+ is larger than configured max size (\d+)")
_NO_EXCHANGE = re.compile(r"no exchange '(.*)' in vhost")

# One publish: the outbox message and what goes on the wire for it.
_Outgoing = tuple[Message, amqp_batches.Publish]


class RabbitMqTarget:
    """`amqp://user:pass@host:port/vhost?exchange=T&routing_key=T[&queue=Q][&timeout=S]`."""

    def __init__(self, url: TargetUrl, *, declare: bool) -> None:
        self._url = url
        self._declare = declare
        self._address = url.address(5671 if url.scheme == "amqps" else 5672)
        quoted = url.path[1:]
        if "/" in quoted:
            raise RelayUrlError(
                f"--to {url.masked}: the virtual host {quoted!r} must be one path segment"
                " (write a '/' in its name as %2F)"
            )
        self._vhost = urllib.parse.unquote(quoted) or "/"
        self._queue = url.parameters.get("queue")
        if self._queue is not None and not self._queue:
            raise RelayUrlError(f"--to {url.masked}: queue= names no queue")
        exchange = url.parameters.get("exchange", "")
        # The default exchange delivers to the queue the routing key names, so with a queue=
        # and no routing_key= the key that reaches that queue is its name.
        routing_key = "{message_type}"
        if self._queue is not None and not exchange:
            routing_key = self._queue.replace("{", "{{").replace("}", "}}")
        try:
            self._exchange = Template("exchange", exchange)
            self._routing_key = Template(
                "routing_key", url.parameters.get("routing_key", routing_key)
            )
        except TemplateError as error:
            raise RelayUrlError(f"--to {url.masked}: {error}") from None
        self._timeout = url.number("timeout", 10, 0.1, 600)
        self._cloud_events = url.cloud_events()
        self._connection: aio_pika.abc.AbstractConnection | None = None
        self._channel: aio_pika.abc.AbstractChannel | None = None
        self._prepared: set[str] = set()
        """The exchanges checked (or declared) on the current channel, by name."""
        self._max_size: int | None = None
        """The broker's largest message body, once a larger one made it close the channel."""

    @property
    def name(self) -> str:
        return self._url.masked

    async def publish(self, messages: Sequence[Message]) -> Mapping[Position, Unsent]:
        unsent: dict[Position, Unsent] = {}
        pending: list[_Outgoing] = []
        for message in messages:
            amqp = _amqp_publish(
                message,
                self._exchange.render(message),
                self._routing_key.render(message),
                self._cloud_events,
            )
            reason = _overlong(amqp)
            if reason is not None:
                unsent[message.at] = reason
                continue
            pending.append((message, amqp))
        try:
            async with asyncio.timeout(self._timeout):
                while pending:
                    if self._max_size is not None:
                        for message, amqp in pending:
                            if len(amqp.body) > self._max_size:
                                unsent[message.at] = (
                                    f"RabbitMQ: the payload is {len(amqp.body)} bytes, larger"
                                    f" than the broker's max_message_size {self._max_size}"
                                )
                        pending = [item for item in pending if item[0].at not in unsent]
                    pending = await self._send(pending, unsent)
        except TimeoutError:
            # The connection may be wedged, and its late confirms would answer nobody.
            await self.close()
            raise BrokerUnavailable(
                "timeout",
                f"RabbitMQ at {self._address} did not confirm the batch within"
                f" {self._timeout:g}s (timeout=)",
            ) from None
        except BrokerUnavailable as error:
            if error.kind in ("connection", "server_error"):
                await self.close()
            raise
        return whole_or_each(messages, unsent)

    async def check(self) -> None:
        """Connects and opens the channel: RabbitMQ shows no setting that breaks the
        at-least-once promise (a queue's overflow policy only costs retries)."""
        try:
            async with asyncio.timeout(self._timeout):
                await self._open_channel()
        except TimeoutError:
            await self.close()
            raise BrokerUnavailable("timeout", f"RabbitMQ at {self._address}: no answer") from None
        except _BROKER_ERRORS as error:
            await self.close()
            raise self._unavailable(error, None) from None

    async def close(self) -> None:
        connection, self._connection, self._channel = self._connection, None, None
        if connection is not None:
            # A lost or wedged connection must not hold up the relay's shutdown or retry.
            with contextlib.suppress(*_BROKER_ERRORS, TimeoutError):
                async with asyncio.timeout(1):
                    await connection.close()

    async def _send(
        self, batch: list[_Outgoing], unsent: dict[Position, Unsent]
    ) -> list[_Outgoing]:
        """Publish `batch` and await its confirms, adding to `unsent` each message the broker
        did not take (a nack, a return, a channel it closed); return what is left to publish
        again after the broker refused a message over its size limit (now known). What it
        confirmed is published: never sent again, so a full queue's freed room goes to the
        messages it refused, not to repeats."""
        try:
            channel = await self._open_channel()
            for name in dict.fromkeys(amqp.exchange for _, amqp in batch):  # in batch order
                await self._prepare(channel, name)
            frames = await channel.get_underlay_channel()
            assert isinstance(frames, aiormq.Channel)
            # The batch goes out in order as one write; the confirms come back concurrently.
            confirmations = await amqp_batches.publish(frames, [amqp for _, amqp in batch])
        except _BROKER_ERRORS as error:
            raise self._unavailable(error, None) from None
        results = await asyncio.gather(*confirmations, return_exceptions=True)
        failures = [
            (result, item)
            for result, item in zip(results, batch, strict=True)
            if isinstance(result, BaseException)
        ]
        if not failures:
            return []
        failure = failures[0][0]
        too_large = _TOO_LARGE.search(str(failure))
        if isinstance(failure, ChannelPreconditionFailed) and too_large:
            limit = int(too_large[1])
            if limit != self._max_size:
                self._max_size = limit
                # aiormq may still write the batch's later publishes on the closed channel,
                # which makes the server close the whole connection: start on a new one.
                await self.close()
                return [item for _, item in failures]
        # A channel the broker closed fails every publish after it with its own error: each
        # of those says what closed it.
        closed: BrokerUnavailable | None = None
        for said, item in failures:
            if isinstance(said, DeliveryError):
                unsent[item[0].at] = self._unavailable(said, item)
                continue
            closed = closed or self._unavailable(said, item)
            unsent[item[0].at] = closed
        if closed is not None and closed.kind in ("connection", "server_error"):
            await self.close()
        missing = any(
            isinstance(u, BrokerUnavailable) and u.kind == "missing" for u in unsent.values()
        )
        if missing and self._declare and self._prepared:
            # Deleted while the relay runs: declared again at the next attempt, not only
            # once per channel.
            log.warning("relay to RabbitMQ: a destination went missing, declaring it again")
            self._prepared = set()
        return []

    async def _open_channel(self) -> aio_pika.abc.AbstractChannel:
        connection = self._connection
        # aio-pika marks a connection closed only when closed by us: a lost one is seen below.
        transport = connection.transport if connection else None
        if connection is None or transport is None or transport.connection.is_closed:
            await self.close()
            connection = self._connection = await self._connect()
        if self._channel is None or self._channel.is_closed:
            # A channel the server closed (a missing exchange) is replaced, the connection kept.
            self._prepared = set()
            channel = connection.channel(publisher_confirms=True, on_return_raises=True)
            await channel.initialize()
            self._channel = channel
        return self._channel

    async def _connect(self) -> aio_pika.abc.AbstractConnection:
        # Built from parts: the URL's query is the relay's, not the client's.
        try:
            return await aio_pika.connect(
                host=self._url.host,
                port=self._url.port or (5671 if self._url.scheme == "amqps" else 5672),
                login=self._url.username or "guest",
                password=self._url.password or ("" if self._url.username else "guest"),
                virtualhost=self._vhost,
                ssl=self._url.scheme == "amqps",
                client_properties={"connection_name": "outbox-relay"},
            )
        except (AuthenticationError, ProbableAuthenticationError):  # RabbitMQ's 403 is "probable"
            raise BrokerUnavailable(
                "refused",
                f"RabbitMQ at {self._address} refused the login (check the user name and password)",
            ) from None
        except InvalidFrameError as error:
            if "OpenOk" not in str(error):
                raise
            # The server answered Connection.Open with Connection.Close: no such virtual host,
            # or the user may not use it.
            raise BrokerUnavailable(
                "missing",
                f"RabbitMQ at {self._address}: virtual host {self._vhost!r} does not exist or"
                " the user has no access to it",
            ) from None

    async def _prepare(self, channel: aio_pika.abc.AbstractChannel, name: str) -> None:
        """The exchange `name` checked (or declared) once per channel, its queue with it (the
        default exchange, named "", always exists)."""
        if name in self._prepared:
            return
        if name and self._declare:
            await channel.declare_exchange(name, aio_pika.ExchangeType.TOPIC, durable=True)
        elif name:
            # Checked up front: a publish to a missing exchange closes the channel with a
            # reason that would not say which of the batch's exchanges is missing.
            try:
                await channel.declare_exchange(name, passive=True)
            except ChannelNotFoundEntity:
                raise self._missing_exchange(name) from None
        if self._queue is not None:
            await self._prepare_queue(channel, name)
        self._prepared.add(name)

    async def _prepare_queue(self, channel: aio_pika.abc.AbstractChannel, exchange: str) -> None:
        assert self._queue is not None
        if not self._declare:
            try:
                await channel.declare_queue(self._queue, passive=True)
            except ChannelNotFoundEntity:
                raise BrokerUnavailable(
                    "missing",
                    f"RabbitMQ: queue {self._queue!r} does not exist (declare it, or run the"
                    " relay with --declare)",
                ) from None
            return
        queue = await channel.declare_queue(self._queue, durable=True)
        if exchange:
            await queue.bind(exchange, "#")

    def _missing_exchange(self, name: str) -> BrokerUnavailable:
        return BrokerUnavailable(
            "missing",
            f"RabbitMQ: exchange {name!r} does not exist in virtual host {self._vhost!r}"
            f" ({self._hint('declare it')})",
        )

    def _hint(self, fix: str, *, queue: bool = False) -> str:
        """What to do, true of this relay: --declare is suggested only to one without it."""
        if self._declare and (self._queue is not None or not queue):
            return "it is declared again at the next attempt"
        if self._declare:
            return f"{fix}, or give the relay a queue= to declare"
        return f"{fix}, or run the relay with --declare" + (" and queue=" if queue else "")

    def _unavailable(self, error: BaseException, failed: _Outgoing | None) -> BrokerUnavailable:
        """The broker's answer to the `failed` publish (or to preparing for the batch), as the
        relay's kind and one line."""
        said = self._scrubbed(str(error))
        if isinstance(error, DeliveryError) and failed is not None:
            message, amqp = failed
            return self._undelivered(error, message, amqp.exchange, amqp.routing_key)
        if isinstance(error, ChannelNotFoundEntity):
            named = _NO_EXCHANGE.search(str(error))
            if named:
                return self._missing_exchange(named[1])
            return BrokerUnavailable("missing", f"RabbitMQ: {said}")
        if isinstance(error, ChannelAccessRefused):
            return BrokerUnavailable("refused", f"RabbitMQ: {said}")
        if isinstance(error, ChannelClosed):
            return BrokerUnavailable("server_error", f"RabbitMQ closed the channel: {said}")
        if isinstance(error, AMQPError) and not isinstance(error, ConnectionError):
            return BrokerUnavailable("server_error", f"RabbitMQ at {self._address}: {said}")
        # Refused or lost connections, and a channel that closed under a cancelled publish.
        return BrokerUnavailable(
            "connection",
            f"RabbitMQ at {self._address}: connection failed or lost"
            f" ({said or type(error).__name__})",
        )

    def _undelivered(
        self, error: DeliveryError, message: Message, exchange: str, routing_key: str
    ) -> BrokerUnavailable:
        """A returned message is a missing destination; a nacked one, a broker refusing now."""
        if isinstance(error, PublishError) and not exchange:
            return BrokerUnavailable(
                "missing",
                f"RabbitMQ: no queue named {routing_key!r} (the default exchange delivers to"
                f" the queue the routing key names; {self._hint('declare it', queue=True)})",
            )
        if isinstance(error, PublishError):
            return BrokerUnavailable(
                "missing",
                f"RabbitMQ: no queue is bound to exchange {exchange!r} for routing key"
                f" {routing_key!r} ({self._hint('bind one', queue=True)})",
            )
        return BrokerUnavailable(
            "refused",
            f"RabbitMQ at {self._address} nacked message {fields.message_id(message)!r} for"
            f" exchange {exchange!r} (a full queue with x-overflow=reject-publish, or the"
            " broker could not store it)",
        )

    def _scrubbed(self, text: str) -> str:
        """Library text with the password masked, should a client ever quote it or its URL."""
        password = self._url.password
        return mask_password(text.replace(password, "***") if password else text)


def _amqp_publish(
    message: Message, exchange: str, routing_key: str, cloud_event: bool
) -> amqp_batches.Publish:
    """The message's properties as aio-pika's Message gave them (persistent, priority 0).
    format=cloudevents: binary mode as the CloudEvents SDK's RabbitMQ binding has it (`ce-`
    headers as they are, the content_type property the data's)."""
    own = (
        cloud_events.binary_headers(message, percent_encoded=False, content_type=False)
        if cloud_event
        else fields.metadata(message)
    )
    properties = commands.Basic.Properties(
        content_type="application/json",
        delivery_mode=aio_pika.DeliveryMode.PERSISTENT,
        headers={**own, **fields.application_headers(message, fields.AMQP_NAMES)},
        message_id=fields.message_id(message),
        message_type=message.message_type,
        priority=0,
        timestamp=message.appended_at,
    )
    return amqp_batches.Publish(exchange, routing_key, properties, fields.payload(message))


def _overlong(amqp: amqp_batches.Publish) -> str | None:
    """Why the message can never be sent over AMQP 0-9-1, if a short string is too long."""
    properties = amqp.properties
    for what, value in (
        ("exchange", amqp.exchange),
        ("routing key", amqp.routing_key),
        ("message_id", properties.message_id or ""),
        ("type", properties.message_type or ""),
        *(("header name", name) for name in properties.headers or {}),
    ):
        if len(value.encode()) > _SHORT_STRING:
            return f"RabbitMQ: the {what} {value[:40]!r}... is over {_SHORT_STRING} bytes"
    return None
