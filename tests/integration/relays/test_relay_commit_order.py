"""A broker receives a key's messages in the order their transactions committed: the relay in
the daemon, the two writers of tests/support/locked_writers.py, and a Redis stream read back
in arrival order (every target publishes a call's messages in the order it is given them)."""

import uuid
from typing import cast

import redis

import outbox_relays
from outbox_relays import fields
from tests.integration.test_daemon import subscribe, wait_for
from tests.support import brokers
from tests.support.inprocess import running_daemon
from tests.support.locked_writers import append_through_a_row_lock


def test_a_redis_stream_receives_them_in_commit_order(database_url: str) -> None:
    brokers.require(brokers.REDIS)
    stream = f"commit-order-{uuid.uuid4().hex[:8]}"
    subscribe(database_url, strategy="pinned", consumers=4)
    pair = append_through_a_row_lock(database_url)
    client = redis.Redis(host=brokers.REDIS[1], port=brokers.REDIS[2], decode_responses=True)
    try:
        with running_daemon(
            database_url,
            ["sub"],
            outbox_relays.handler(f"redis://127.0.0.1:6379/0?stream={stream}", declare=True),
        ):
            wait_for(lambda: client.xlen(stream) >= 2)
        entries = cast(list[tuple[str, dict[str, str]]], client.xrange(stream))
    finally:
        client.delete(stream, *client.scan_iter(f"{stream}:outbox-published:*"))
        client.close()
    assert [entry[fields.MESSAGE_ID] for _, entry in entries] == pair.message_ids
