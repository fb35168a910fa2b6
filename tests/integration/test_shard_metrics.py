"""The per-shard gauges of a daemon's /metrics, read from outbox.subscription_shard_status.

No daemon runs: the collector a daemon registers is scraped as Prometheus would (the text
exposition, parsed by Prometheus's own parser), over shard rows and leases stored directly.
"""

import asyncio

import psycopg
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

import outbox
from outbox.positions import START
from outbox.shards import message_shard
from poller import operations
from poller.daemon.reporting.metrics import DaemonMetrics
from poller.daemon.reporting.metrics_collector import StateCollector
from tests.support.inprocess import FAST
from tests.support.metrics_scrape import Series, value


async def scraped(database_url: str, subscriptions: list[str]) -> Series:
    """What /metrics would serve: the collector asks the event loop for the terms' views, so
    the scrape runs on another thread, as the HTTP server's does."""
    metrics = DaemonMetrics(subscriptions, FAST)
    metrics.registry.register(StateCollector(metrics, database_url))
    text = (await asyncio.to_thread(generate_latest, metrics.registry)).decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


async def test_every_shard_of_the_daemons_subscriptions_has_its_gauges(database_url: str) -> None:
    keys = [f"customer-{n}" for n in range(8)]
    with psycopg.connect(database_url) as conn:
        operations.create(conn, "plain", "orders", "start", {})
        operations.create(conn, "sharded", "orders", "start", {}, shards=2)
        operations.create(conn, "other", "orders", "start", {}, shards=3)  # not the daemon's
        positions = [outbox.append(conn, "orders", "T", {}, partition_key=key) for key in keys]
        conn.commit()
        conn.execute(
            "UPDATE outbox.subscription_shards SET last_processed_transaction_id ="
            " (SELECT transaction_id FROM outbox.messages WHERE position = %s),"
            " last_processed_position = %s"
            " WHERE subscription_id = 'sharded' AND shard = 1",
            (positions[-1], positions[-1]),
        )
        conn.execute(
            "INSERT INTO outbox.subscription_leaders"
            " (subscription_id, shard_count, shard, token, holder, host, pid, since, expires_at)"
            " VALUES ('sharded', 2, 1, 1, 'h', 'worker-host', 7, now(),"
            "         clock_timestamp() + interval '1 hour')"
        )
        transaction = conn.execute(
            "SELECT transaction_id::text::bigint FROM outbox.messages WHERE position = %s",
            (positions[-1],),
        ).fetchone()
    assert transaction is not None

    series = await scraped(database_url, ["plain", "sharded"])
    assert value(series, "outbox_database_up") == 1
    subscriptions = {
        dict(labels)["subscription"] for name, labels in series if name.startswith("outbox_shard")
    }
    assert subscriptions == {"plain", "sharded"}

    plain = {"subscription": "plain", "shard": "0/1"}
    assert value(series, "outbox_shard_messages_behind", **plain) == len(keys)
    assert value(series, "outbox_shard_checkpoint_position", **plain) == START.position
    assert value(series, "outbox_shard_leader_alive", **plain) == 0

    shard_0 = {"subscription": "sharded", "shard": "0/2"}
    shard_1 = {"subscription": "sharded", "shard": "1/2"}
    in_shard_0 = sum(
        message_shard(key, position, 2) == 0 for key, position in zip(keys, positions, strict=True)
    )
    assert 0 < in_shard_0 < len(keys)
    assert value(series, "outbox_shard_messages_behind", **shard_0) == in_shard_0
    assert value(series, "outbox_shard_messages_behind", **shard_1) == 0
    assert value(series, "outbox_shard_checkpoint_position", **shard_1) == positions[-1]
    assert value(series, "outbox_shard_checkpoint_transaction_id", **shard_1) == transaction[0]
    assert value(series, "outbox_shard_leader_alive", **shard_0) == 0
    assert value(series, "outbox_shard_leader_alive", **shard_1) == 1
    assert value(series, "outbox_shard_draining", **shard_1) == 0

    # During a change of the count both layouts have a shard 0: the label tells them apart.
    with psycopg.connect(database_url) as conn:
        change = operations.change_shard_count(conn, "sharded", 3)
    assert change.barrier is not None
    changing = await scraped(database_url, ["sharded"])
    assert value(changing, "outbox_shard_draining", **shard_0) == 1
    assert value(changing, "outbox_shard_messages_behind", **shard_0) == in_shard_0
    for shard in range(3):
        new = {"subscription": "sharded", "shard": f"{shard}/3"}
        assert value(changing, "outbox_shard_draining", **new) == 0
        assert value(changing, "outbox_shard_checkpoint_position", **new) == float(
            change.barrier.position
        )
