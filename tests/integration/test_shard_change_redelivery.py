"""A change of the shard count delivers every message once when nothing fails: one process, no
kill, no lost lease, messages flowing while `subscription update --shards` runs twice.

Before the database capped the old layout at the barrier, the terms that started before a
change read on without an upper bound until their next renewal, delivered messages past the
barrier, and wrote their checkpoints past it; the drain check passed and the new shards
delivered the same messages again (29 of 2,231 in issue 34's run). A plain subscription's
term lost the checkpoints it wrote after the change (refused: its checkpoint had moved to a
shard row), and its bounded successor delivered them again."""

import threading
import time
from collections import Counter

import psycopg

from poller import operations
from poller.daemon.options import DaemonOptions
from poller.message import Message
from poller.operations import change_shard_count
from tests.support.daemons import wait_until
from tests.support.inprocess import running_daemon
from tests.support.shards import caught_up, draining
from tests.support.writers import KeyedWriter

# Short renewals, so each change drains in well under a second.
OPTIONS = DaemonOptions(lease_seconds=2.0, renew_every=0.2, standby_poll=0.1, shutdown_timeout=5)


class Deliveries:
    """Every delivery's message id, from the handler threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.ids: list[str] = []
        self.positions: set[int] = set()

    def __call__(self, message: Message) -> None:
        time.sleep(0.0005)  # a little work: runs stay in flight while the change lands
        with self._lock:
            self.ids.append(message.message_id)
            self.positions.add(message.at.position)

    @property
    def count(self) -> int:
        with self._lock:
            return len(self.ids)

    def wait_for(self, more: int, what: str) -> None:
        """Wait until `more` deliveries more than now have been made."""
        target = self.count + more
        wait_until(lambda: self.count >= target, 30, what)

    def duplicates(self) -> dict[str, int]:
        with self._lock:
            return {id_: n for id_, n in Counter(self.ids).items() if n > 1}


def test_changes_of_the_shard_count_under_a_stream_deliver_each_message_once(
    database_url: str,
) -> None:
    url = database_url
    with psycopg.connect(url, autocommit=True) as conn:
        operations.create(
            conn,
            "sub",
            "orders",
            "start",
            {"consumers": 4, "checkpoint_after": 0.05, "min_checkpoint_count": 1},
        )
    deliveries = Deliveries()
    writer = KeyedWriter(url, "orders", keys=40, cap=100_000, interval=0.002, seed=3, threads=2)
    with running_daemon(url, ["sub"], deliveries, OPTIONS), writer:
        deliveries.wait_for(300, "deliveries under way")
        for shards in (3, 2):
            with psycopg.connect(url, autocommit=True) as conn:
                change_shard_count(conn, "sub", shards)
            wait_until(lambda: not draining(url, "sub"), 30, f"the change to {shards} shards")
            deliveries.wait_for(300, f"deliveries on {shards} shards")
        written = writer.stop()
        wait_until(lambda: caught_up(url, "sub"), 30, "every message delivered")
    assert len(written.committed) > 1000
    assert written.committed <= deliveries.positions
    duplicates = deliveries.duplicates()
    assert not duplicates, (
        f"{len(duplicates)} of {len(set(deliveries.ids))} messages delivered more than once"
    )
