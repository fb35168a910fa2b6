"""A process's cost in connections is fixed per subscription, whatever the number of shards it
leads (poller/daemon/process/subscription_connections.py): 64 shards in one process on a
server's default max_connections of 100 deliver everything, in order per key, on at most six
connections plus the LISTEN one. Before, a process held two per shard plus three: 131 here."""

import time
from collections import defaultdict

import psycopg

import outbox
from poller import operations
from poller.daemon.options import DaemonOptions
from poller.daemon.process.subscription_connections import CONNECTIONS_PER_SUBSCRIPTION
from poller.message import Message
from tests.integration.test_daemon import Recorder, wait_for
from tests.support.inprocess import running_daemon

SHARDS = 64
MESSAGES = 2_000
KEYS = 200
# Renewals every 0.5 s: 64 leases on one connection are 128 statements a second.
OPTIONS = DaemonOptions(lease_seconds=2.0, renew_every=0.5, standby_poll=0.1, shutdown_timeout=5.0)


# The daemon's connections to this test's database (the retention pass's aside).
DAEMON_CONNECTIONS = (
    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
    " AND application_name LIKE 'outbox-poller:%'"
)
LED_SHARDS = (
    "SELECT count(*) FROM outbox.subscription_leaders"
    " WHERE subscription_id = 'sub' AND expires_at > clock_timestamp()"
)


def count(url: str, query: str) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(query).fetchone()
    assert row is not None
    return int(row[0])


def test_64_shards_in_one_process_hold_a_few_connections_and_deliver_in_order(
    database_url: str,
) -> None:
    with psycopg.connect(database_url, autocommit=True) as conn:
        operations.create(
            conn, "sub", "orders", "start", {"strategy": "pinned", "consumers": 8}, SHARDS
        )
    recorder = Recorder()
    most = 0
    with running_daemon(database_url, ["sub"], recorder, OPTIONS):
        with psycopg.connect(database_url) as conn:
            for n in range(MESSAGES):
                outbox.append(conn, "orders", "T", {"n": n}, partition_key=f"key-{n % KEYS}")
        deadline = time.monotonic() + 60
        while len(recorder.positions()) < MESSAGES:
            assert time.monotonic() < deadline, f"{len(recorder.positions())} delivered"
            most = max(most, count(database_url, DAEMON_CONNECTIONS))
            time.sleep(0.05)
        wait_for(lambda: count(database_url, LED_SHARDS) == SHARDS)
        most = max(most, count(database_url, DAEMON_CONNECTIONS))
    # Every shard led here, on the subscription's connections and the LISTEN one.
    assert most <= CONNECTIONS_PER_SUBSCRIPTION + 1, most
    by_key: dict[str | None, list[int]] = defaultdict(list)
    with recorder.lock:
        delivered: list[Message] = list(recorder.messages)
    for message in delivered:
        by_key[message.partition_key].append(message.position)
    assert len({m.position for m in delivered}) == len(delivered) == MESSAGES  # each once
    assert all(positions == sorted(positions) for positions in by_key.values())
