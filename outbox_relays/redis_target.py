"""Publish to Redis streams: `redis://[user:pass@]host:port/DB?stream=TEMPLATE`.

Each message becomes one stream entry: the field `data` holds the payload's JSON text, then
every field of `outbox_relays.fields.metadata` follows under its own name (outbox-message-id,
outbox-message-type, outbox-publication, outbox-position, outbox-appended-at, and
outbox-partition-key when the message has a key), then the message's own headers, each a
field of its own (`outbox_relays.fields.application_headers`, named as REDIS_NAMES says).

Redis streams have no de-duplication of their own, so one Lua script does it in the same
atomic step as the add: per message, `SET <stream>:outbox-published:<dedup id> 1 NX PX
<dedup_window>` (`outbox_relays.fields.dedup_id`: the publication and the message id), and XADD
only when that SET succeeded. A batch the relay publishes again after a failure (or
redis-py's own reconnect-and-retry) thus adds only what is not there yet.

Why a script and not explicit entry ids derived from (transaction_id, position), which Redis
would refuse to add twice: explicit ids must increase per stream, so when two consumers of one
subscription publish into one stream out of global order, the later-published, lower id is
refused, and that refusal cannot be told apart from a duplicate's: a lost message.
"""

import asyncio
import contextlib
import logging
import re
import uuid
from collections.abc import Mapping, Sequence

import orjson
import redis.asyncio
import redis.exceptions
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.commands.core import AsyncScript

from outbox.positions import Position
from outbox_relays import cloud_events, fields, redis_checks
from outbox_relays.target import BrokerUnavailable, Unsent, whole_or_each
from outbox_relays.target_url import RelayUrlError, TargetUrl
from outbox_relays.templates import Template, TemplateError
from poller.message import Message

# KEYS: stream 1, its dedup key 1, stream 2, dedup key 2, ... (one pair per message; a
# script must declare every key it touches). ARGV: the dedup window in ms, "1" to create a
# missing stream, the approximate maxlen ("0" for none), then per message one JSON array of
# its field and value items (strings). One argument a message, not one an item: the client
# packs each argument of a command in Python and the server parses each one, and a message is
# some 15 items; cjson (built into Redis' Lua) unpacks the array in C. Returns {stop,
# wrong...}: stop is the number of the message whose stream was missing, where the script
# stopped after adding the messages before it (0: it went through), then the numbers of the
# messages whose stream name is a key of another type (WRONGTYPE), which it skipped: those can
# never be added.
_SCRIPT = """
local window, create, maxlen = ARGV[1], ARGV[2] == '1', ARGV[3]
local options = {}
if not create then options[#options + 1] = 'NOMKSTREAM' end
if maxlen ~= '0' then
    options[#options + 1] = 'MAXLEN'; options[#options + 1] = '~'; options[#options + 1] = maxlen
end
options[#options + 1] = '*'
local answer = {0}
for i = 1, #KEYS, 2 do
    local stream, seen = KEYS[i], KEYS[i + 1]
    if redis.call('SET', seen, '1', 'NX', 'PX', window) then
        local items = cjson.decode(ARGV[3 + (i + 1) / 2])
        local command = {stream}
        for n = 1, #options do command[n + 1] = options[n] end
        local before = #command
        for n = 1, #items do command[before + n] = items[n] end
        -- pcall: a failing XADD (a key of another type) must not leave its SET behind, or
        -- the next attempt would take the message for a duplicate and drop it.
        local added = redis.pcall('XADD', unpack(command))
        if not added or type(added) == 'table' then
            redis.call('DEL', seen)
            if not added then
                answer[1] = (i + 1) / 2
                return answer
            end
            if string.sub(added.err, 1, 9) ~= 'WRONGTYPE' then
                return redis.error_reply(added.err .. " (stream '" .. stream .. "')")
            end
            table.insert(answer, (i + 1) / 2)
        end
    end
end
return answer
"""

log = logging.getLogger(__name__)


class RedisTarget:
    """Adds each message to the stream its template names, skipping those already added
    within the de-duplication window; a batch is one script call, one round trip."""

    def __init__(self, url: TargetUrl, *, declare: bool) -> None:
        self._url = url
        self._declare = declare
        try:
            self._stream = Template("stream", url.required("stream"))
        except TemplateError as error:
            raise RelayUrlError(f"--to {url.masked}: {error}") from None
        database = url.path.removeprefix("/") or "0"
        if not re.fullmatch(r"[0-9]+", database):
            raise RelayUrlError(
                f"--to {url.masked}: the path {url.path!r} must be a database number, like /0"
            )
        self._database = int(database)
        # The marker of a published message must outlive the longest outage plus restart of
        # the relay: a batch re-published after it expired is added a second time.
        window = url.number("dedup_window", 86400, 1, 2592000)
        self._window_ms = str(round(window * 1000))
        if warning := redis_checks.window_warning(window):
            log.warning("relay to %s: %s", url.masked, warning)
        self._checked = False
        # 0 (no trimming) only when absent
        self._maxlen = str(url.whole_number("maxlen", 0, 1, 2**63 - 1))
        self._generation = url.dedup_generation()
        self._cloud_events = url.cloud_events()
        self._timeout = url.number("timeout", 10, 0.1, 600)
        self.connection_name = f"outbox-relay-{uuid.uuid4().hex[:12]}"
        """The connection's name in Redis' CLIENT LIST."""
        self._address = url.address(6379)
        self._client: redis.asyncio.Redis | None = None
        self._script: AsyncScript | None = None

    @property
    def name(self) -> str:
        return self._url.masked

    async def publish(self, messages: Sequence[Message]) -> Mapping[Position, Unsent]:
        keys: list[str] = []
        args: list[str | bytes] = [self._window_ms, "1" if self._declare else "0", self._maxlen]
        for message in messages:
            stream = self._stream.render(message)
            marker = f"{stream}:outbox-published:{fields.dedup_id(message, self._generation)}"
            keys += (stream, marker)
            if self._cloud_events:  # structured mode: the event in the JSON format
                event = cloud_events.structured(message, self._generation)
                items = ["data", event, "content-type", cloud_events.STRUCTURED_CONTENT_TYPE]
            else:
                items = ["data", message.data_text]
                for field, value in fields.metadata(message).items():
                    items += (field, value)
            for field, value in fields.application_headers(message, fields.REDIS_NAMES).items():
                items += (field, value)
            # orjson writes the text as it is, UTF-8 (no \u escapes), which cjson passes
            # through unchanged.
            args.append(orjson.dumps(items))
        try:
            async with asyncio.timeout(self._timeout):
                answer = await self._run(keys, args)
        except (TimeoutError, redis.exceptions.TimeoutError) as error:
            await self.close()
            raise BrokerUnavailable(
                "timeout", f"Redis {self._address}: no answer within {self._timeout:g}s"
            ) from error
        except (
            redis.exceptions.AuthenticationError,
            redis.exceptions.AuthorizationError,
            redis.exceptions.NoPermissionError,
        ) as error:
            await self.close()
            raise BrokerUnavailable("refused", f"Redis {self._address}: {error}") from error
        except (redis.exceptions.ConnectionError, OSError) as error:
            await self.close()
            raise BrokerUnavailable("connection", f"Redis {self._address}: {error}") from error
        except redis.exceptions.RedisError as error:
            # OOM, READONLY (a replica), a key of another type holding the stream's name: the
            # server's state, not any one message's. Nothing here is refused for one message
            # for good: a jsonb payload (under 256 MB) is always below Redis' 512 MB limit.
            await self.close()
            raise BrokerUnavailable("server_error", f"Redis {self._address}: {error}") from error
        stop, *wrong = answer
        unsent: dict[Position, Unsent] = {}
        for number in wrong:
            message = messages[number - 1]
            unsent[message.at] = (
                f"Redis: the key {self._stream.render(message)!r} holds another type than a"
                " stream (WRONGTYPE): the stream= template names another application's key"
            )
        if stop:
            missing = self._stream.render(messages[stop - 1])
            hint = "" if self._declare else " (create it, or run the relay with --declare)"
            unavailable = BrokerUnavailable(
                "missing", f"Redis: stream {missing!r} does not exist{hint}"
            )
            for message in messages[stop - 1 :]:
                unsent[message.at] = unavailable
        return whole_or_each(messages, unsent)

    async def check(self) -> None:
        try:
            async with asyncio.timeout(self._timeout):
                await self._connected()
        except (TimeoutError, redis.exceptions.RedisError, OSError) as error:
            await self.close()
            raise BrokerUnavailable("connection", f"Redis {self._address}: {error}") from error

    async def _run(self, keys: list[str], args: list[str | bytes]) -> list[int]:
        script = await self._connected()
        answer: list[int] = await script(keys=keys, args=args)
        return answer

    async def _connected(self) -> AsyncScript:
        if self._client is None or self._script is None:
            self._client = redis.asyncio.Redis(
                host=self._url.host,
                port=self._url.port or 6379,
                db=self._database,
                username=self._url.username,
                password=self._url.password,
                ssl=self._url.scheme == "rediss",
                socket_timeout=self._timeout,
                socket_connect_timeout=self._timeout,
                client_name=self.connection_name,
                # One immediate retry on a fresh connection, so a pooled connection the
                # server dropped while idle costs no outage; the script makes it safe.
                retry=Retry(NoBackoff(), 1, supported_errors=(redis.exceptions.ConnectionError,)),
            )
            # EVALSHA, loading the script when the server does not know it yet.
            self._script = self._client.register_script(_SCRIPT)
            if not self._checked:
                await self._check(self._client)
        return self._script

    async def _check(self, client: redis.asyncio.Redis) -> None:
        """Once per process: the server's durability settings, as far as it shows them."""
        config: dict[str, str] = {}
        try:
            for name in redis_checks.SETTINGS:
                said = await client.config_get(name)
                config.update({str(key): str(value) for key, value in said.items()})
        except (redis.exceptions.ResponseError, redis.exceptions.NoPermissionError) as error:
            redis_checks.log_durability(None, str(error))
        else:
            redis_checks.log_durability(config, "")
        self._checked = True

    async def close(self) -> None:
        """Drop the connection pool; the next publish connects afresh."""
        client, self._client, self._script = self._client, None, None
        if client is not None:
            # The connections are being dropped anyway: a failure to close one changes nothing.
            with contextlib.suppress(redis.exceptions.RedisError, OSError):
                await client.aclose()
