"""The Redis streams target against the Redis server on this machine."""

import asyncio
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import cast

import pytest
import redis.asyncio

from outbox_relays import fields
from outbox_relays.kinds import open_target
from outbox_relays.redis_target import RedisTarget
from outbox_relays.target import BrokerUnavailable
from outbox_relays.target_url import RelayUrlError, TargetUrl
from poller.message import Message
from tests.support.brokers import REDIS, require
from tests.support.own_servers import own_redis
from tests.support.relay_messages import made_messages

URL = "redis://127.0.0.1:6379/0"


@pytest.fixture
async def client() -> AsyncIterator[redis.asyncio.Redis]:
    require(REDIS)
    async with redis.asyncio.Redis(host="127.0.0.1", port=6379, decode_responses=True) as client:
        yield client


@pytest.fixture
async def prefix(client: redis.asyncio.Redis) -> AsyncIterator[str]:
    """A unique prefix for this test's streams; every key under it is deleted after."""
    prefix = f"test-relay-{uuid.uuid4().hex}"
    yield prefix
    keys = [key async for key in client.scan_iter(match=f"{prefix}*")]
    if keys:
        await client.delete(*keys)


def target(query: str, *, declare: bool = False, url: str = URL) -> RedisTarget:
    return RedisTarget(TargetUrl.parse(f"{url}?{query}", _PARAMETERS), declare=declare)


_PARAMETERS = frozenset({"stream", "dedup_window", "maxlen", "timeout"})


async def create_stream(client: redis.asyncio.Redis, name: str) -> None:
    """An existing, empty stream."""
    await client.xadd(name, {"x": "1"})
    await client.xtrim(name, maxlen=0)


async def entries(client: redis.asyncio.Redis, stream: str) -> list[dict[str, str]]:
    read = cast(list[tuple[str, dict[str, str]]], await client.xrange(stream))
    return [entry for _, entry in read]


def expected(messages: Sequence[Message]) -> list[dict[str, str]]:
    """The payload, the named fields and the message's own headers (`trace`), as fields."""
    return [
        {"data": m.data_text, **fields.metadata(m), "trace": "t", "outbox-header-names": "trace"}
        for m in messages
    ]


async def dedup_keys(client: redis.asyncio.Redis, prefix: str) -> list[str]:
    return [key async for key in client.scan_iter(match=f"{prefix}*:outbox-published:*")]


async def test_a_batch_is_added_in_order_with_every_field(
    client: redis.asyncio.Redis, prefix: str
) -> None:
    await create_stream(client, prefix)
    messages = made_messages(50) + made_messages(1, key=None, first_transaction=2000)
    relay = target(f"stream={prefix}")
    assert await relay.publish(messages) == {}
    await relay.close()
    got = await entries(client, prefix)
    assert got == expected(messages)
    assert next(iter(got[0])) == "data"
    assert fields.PARTITION_KEY not in got[-1]


async def test_text_beyond_ascii_and_json_escapes_arrive_as_written(
    client: redis.asyncio.Redis, prefix: str
) -> None:
    """Each message reaches the script as one JSON array: what cjson unpacks there must be the
    very text, accents, an emoji (outside the BMP), quotes, backslashes and newlines included."""
    await create_stream(client, prefix)
    texts = ['{"name": "Zoë \\"Ω\\" 🚀"}', '{"path": "C:\\\\x\\ny", "empty": ""}']
    messages = [
        Message(
            position=m.position,
            transaction_id=m.transaction_id,
            publication=m.publication,
            message_id=m.message_id,
            message_type="ordre.passé",
            partition_key="clé",
            data_text=text,
            headers_text=m.headers_text,
            appended_at=m.appended_at,
        )
        for m, text in zip(made_messages(2), texts, strict=True)
    ]
    relay = target(f"stream={prefix}")
    assert await relay.publish(messages) == {}
    await relay.close()
    assert await entries(client, prefix) == expected(messages)
    assert [json.loads(entry["data"]) for entry in await entries(client, prefix)] == [
        {"name": 'Zoë "Ω" 🚀'},
        {"path": "C:\\x\ny", "empty": ""},
    ]


async def test_the_same_batch_again_after_a_crash_is_not_added_twice(
    client: redis.asyncio.Redis, prefix: str
) -> None:
    await create_stream(client, prefix)
    messages = made_messages(50)
    await target(f"stream={prefix}").publish(messages)
    # A new target, as after a restart: only the markers in Redis remember the first publish.
    relay = target(f"stream={prefix}")
    assert await relay.publish(messages) == {}
    await relay.close()
    assert await client.xlen(prefix) == 50
    assert await entries(client, prefix) == expected(messages)
    ttl = await client.pttl(f"{prefix}:outbox-published:{fields.dedup_id(messages[0])}")
    assert 86_000_000 < ttl <= 86_400_000


async def test_an_overlapping_batch_adds_only_the_new_messages(
    client: redis.asyncio.Redis, prefix: str
) -> None:
    await create_stream(client, prefix)
    messages = made_messages(50)
    relay = target(f"stream={prefix}&dedup_window=60")
    await relay.publish(messages[:30])
    await relay.publish(messages[20:])
    await relay.close()
    assert await entries(client, prefix) == expected(messages)
    ttl = await client.pttl(f"{prefix}:outbox-published:{fields.dedup_id(messages[0])}")
    assert 0 < ttl <= 60_000


async def test_a_missing_stream_is_named_and_nothing_is_added(
    client: redis.asyncio.Redis, prefix: str
) -> None:
    relay = target(f"stream={prefix}")
    with pytest.raises(BrokerUnavailable) as raised:
        await relay.publish(made_messages(3))
    await relay.close()
    assert raised.value.kind == "missing"
    assert raised.value.reason == (
        f"Redis: stream '{prefix}' does not exist (create it, or run the relay with --declare)"
    )
    assert not await client.exists(prefix)
    assert await dedup_keys(client, prefix) == []


async def test_declare_creates_the_stream(client: redis.asyncio.Redis, prefix: str) -> None:
    messages = made_messages(5)
    relay = target(f"stream={prefix}", declare=True)
    assert await relay.publish(messages) == {}
    await relay.close()
    assert await entries(client, prefix) == expected(messages)


async def test_a_template_spreads_one_batch_over_two_streams(
    client: redis.asyncio.Redis, prefix: str
) -> None:
    a = made_messages(3, key="a")
    b = made_messages(3, key="b", first_transaction=2000)
    batch = [a[0], b[0], a[1], b[1], a[2], b[2]]
    await create_stream(client, f"{prefix}.a")
    relay = target(f"stream={prefix}.{{partition_key}}")
    # Stream b is missing: the script stops at b's first message, a[0] already added and
    # finished; the rest waits.
    unsent = await relay.publish(batch)
    assert list(unsent) == [message.at for message in batch[1:]]
    for answer in unsent.values():
        assert isinstance(answer, BrokerUnavailable)
        assert f"stream '{prefix}.b' does not exist" in answer.reason
    assert await entries(client, f"{prefix}.a") == expected(a[:1])
    await create_stream(client, f"{prefix}.b")
    assert await relay.publish(batch) == {}
    await relay.close()
    assert await entries(client, f"{prefix}.a") == expected(a)
    assert await entries(client, f"{prefix}.b") == expected(b)


async def test_maxlen_trims_the_stream_approximately(
    client: redis.asyncio.Redis, prefix: str
) -> None:
    await create_stream(client, prefix)
    messages = made_messages(300)
    relay = target(f"stream={prefix}&maxlen=10")
    await relay.publish(messages)
    await relay.close()
    # `~` trims whole nodes of (by default) 100 entries: fewer than added, at least maxlen.
    assert 10 <= await client.xlen(prefix) < 300
    assert (await entries(client, prefix))[-1] == expected(messages[-1:])[0]


async def test_a_key_of_another_type_parks_that_message_only_and_keeps_no_marker(
    client: redis.asyncio.Redis, prefix: str
) -> None:
    await client.set(f"{prefix}.w", "another application's key")
    await create_stream(client, f"{prefix}.a")
    a = made_messages(2, key="a")
    wrong = made_messages(1, key="w", first_transaction=2000)
    relay = target(f"stream={prefix}.{{partition_key}}")

    unsent = await relay.publish([a[0], *wrong, a[1]])

    assert list(unsent) == [wrong[0].at]
    assert f"the key '{prefix}.w' holds another type than a stream (WRONGTYPE)" in str(
        unsent[wrong[0].at]
    )
    assert await entries(client, f"{prefix}.a") == expected(a)
    assert await dedup_keys(client, f"{prefix}.w") == []  # a replay is not taken as a dup
    await client.delete(f"{prefix}.w")
    await create_stream(client, f"{prefix}.w")
    assert await relay.publish(wrong) == {}
    await relay.close()
    assert await entries(client, f"{prefix}.w") == expected(wrong)


@pytest.mark.parametrize(
    ("query", "complaint"),
    [
        ("", "stream= is required"),
        ("stream=s&partition=1", "unknown parameter 'partition'"),
        ("stream=s.{key}", "names {key}"),
        ("stream=s&maxlen=1.5", "maxlen=1.5 must be a whole number"),
        ("stream=s&maxlen=0", "maxlen='0' must be a number from 1"),
        ("stream=s&dedup_window=0", "dedup_window='0' must be a number from 1 to"),
        ("stream=s&timeout=0", "timeout='0'"),
        ("stream=s&dedup_generation=1.5", "dedup_generation=1.5 must be a whole number"),
        ("stream=s&dedup_generation=-1", "dedup_generation='-1' must be a number from 0"),
    ],
)
def test_bad_parameters_are_refused_at_start(query: str, complaint: str) -> None:
    with pytest.raises(RelayUrlError, match=complaint.replace("{", r"\{").replace(".", r"\.")):
        open_target(f"redis://user:s3cret@127.0.0.1:6379/0?{query}")


@pytest.mark.parametrize("path", ["/x", "/0/1", "/-1"])
def test_a_path_that_is_not_a_database_number_is_refused(path: str) -> None:
    with pytest.raises(RelayUrlError, match="must be a database number") as raised:
        open_target(f"redis://user:s3cret@127.0.0.1:6379{path}?stream=s")
    assert "s3cret" not in str(raised.value)


def test_the_database_defaults_to_0_and_rediss_is_accepted() -> None:
    assert isinstance(open_target("redis://127.0.0.1?stream=s"), RedisTarget)
    assert open_target("rediss://u:s3cret@127.0.0.1:6380/2?stream=s").name == (
        "rediss://***@127.0.0.1:6380/2?stream=s"
    )


async def test_wrong_credentials_are_refused_without_showing_them() -> None:
    require(REDIS)
    relay = target("stream=s", url="redis://someone:s3cret@127.0.0.1:6379/0")
    with pytest.raises(BrokerUnavailable) as raised:
        await relay.publish(made_messages(1))
    assert raised.value.kind == "refused"
    assert "s3cret" not in raised.value.reason
    assert "s3cret" not in relay.name


async def test_a_server_that_does_not_answer_is_a_timeout() -> None:
    async def swallow(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()  # never answers
        writer.close()

    async with await asyncio.start_server(swallow, "127.0.0.1", 0) as server:
        port = server.sockets[0].getsockname()[1]
        relay = target("stream=s&timeout=0.3", url=f"redis://127.0.0.1:{port}/0")
        started = time.monotonic()
        with pytest.raises(BrokerUnavailable) as raised:
            await relay.publish(made_messages(1))
        assert time.monotonic() - started < 2
        assert raised.value.kind == "timeout"
        await relay.close()


async def test_a_connection_killed_by_the_server_loses_and_doubles_nothing(
    client: redis.asyncio.Redis, prefix: str
) -> None:
    await create_stream(client, prefix)
    messages = made_messages(20)
    relay = target(f"stream={prefix}")
    await relay.publish(messages[:10])
    ours = [c["id"] for c in await client.client_list() if c["name"] == relay.connection_name]
    assert ours
    for client_id in ours:
        await client.client_kill_filter(_id=client_id)
    # redis-py's retry reconnects; should it not, the relay's next attempt does.
    failures = []
    try:
        await relay.publish(messages[5:])
    except BrokerUnavailable as unavailable:
        failures.append(unavailable.kind)
        await relay.publish(messages[5:])
    assert failures in ([], ["connection"])
    await relay.close()
    assert await entries(client, prefix) == expected(messages)
    assert [c for c in await client.client_list() if c["name"] == relay.connection_name] == []


async def test_publish_after_close_reconnects(client: redis.asyncio.Redis, prefix: str) -> None:
    await create_stream(client, prefix)
    messages = made_messages(4)
    relay = target(f"stream={prefix}")
    await relay.publish(messages[:2])
    await relay.close()
    await relay.publish(messages[2:])
    await relay.close()
    assert await entries(client, prefix) == expected(messages)


async def test_settings_that_cannot_keep_exactly_once_are_warned_about_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    settings = ("--appendonly", "no", "--maxmemory-policy", "volatile-lru")
    with own_redis(tmp_path, *settings) as port, caplog.at_level(logging.INFO):
        relay = target("stream=s&dedup_window=60", url=f"redis://127.0.0.1:{port}/0", declare=True)
        await relay.publish(made_messages(2))
        await relay.publish(made_messages(2, first_transaction=3000))
        await relay.close()
    said = [r.getMessage() for r in caplog.records if r.name.startswith("outbox_relays")]
    assert len(said) == 3, said
    assert "dedup_window=60 s: a batch published again after an outage" in said[0]
    assert "without its append-only file (appendonly no)" in said[1]
    assert "maxmemory-policy volatile-lru: under memory pressure Redis evicts" in said[2]


async def test_a_refused_config_get_says_only_what_the_promise_assumes(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    disabled = ("--rename-command", "CONFIG", "")  # as managed Redis services do
    with own_redis(tmp_path, *disabled) as port, caplog.at_level(logging.INFO):
        relay = target("stream=s", url=f"redis://127.0.0.1:{port}/0", declare=True)
        assert await relay.publish(made_messages(1)) == {}
        await relay.close()
    said = [
        (r.levelno, r.getMessage()) for r in caplog.records if r.name.startswith("outbox_relays")
    ]
    assert len(said) == 1, said
    level, line = said[0]
    assert level == logging.INFO
    assert "cannot read Redis' persistence settings" in line
    assert "assumes appendonly yes" in line
