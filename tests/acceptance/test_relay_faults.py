"""`outbox relay` processes under faults, against the real brokers: 16 out-of-order writers,
the leading relay SIGKILLed several times and its broker connections cut once (a proxy in
between drops them, as a broker killing its clients does).

NATS (Nats-Msg-Id) and Redis (the relay's de-duplicating script) then hold every committed
message exactly once; RabbitMQ at least once, a repeat only of a message in flight at a kill,
with the same message id. Under `pinned` each key's messages reach the broker in outbox order.
A broker unreachable for 10 s parks nothing, holds the checkpoint, and is said in the log.
"""

import random
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from outbox.positions import START, Position
from outbox_cli.demo.workload import WorkloadShape
from tests.support import brokers
from tests.support.broker_streams import DESTINATIONS, Destination
from tests.support.cli import outbox_command
from tests.support.daemons import Daemon, DaemonGroup, daemon_group, wait_until
from tests.support.stored import (
    committed_messages,
    create_subscription,
    current_leader,
    stored_checkpoint,
)
from tests.support.tcp_proxy import TcpProxy
from tests.support.writers import WorkloadLoop, Written

KILLS = 3
WRITERS = WorkloadShape(writers=16, transactions_per_writer=6, max_commit_delay=0.1, seed=77)
SETTINGS = {
    "strategy": "pinned",
    "consumers": 2,
    "max_checkpoint_count": 50,
    "max_retry_count": 2,  # an outage counted as attempts would park at once
    "retry_backoff_initial": 0.05,
    "retry_backoff_max": 0.5,
}
# Each kill waits out the killed relay's lease before its successor publishes (self_fence):
# 8 s made the three kills of each broker ~24 s of waiting. With 3 s a relay renews every
# 0.75 s and fences itself 2.25 s after the last renewal it sent (sampled under this load,
# renewals came at most 0.1 s later than due). A relay that lost its lease anyway would only
# add a takeover, which the checks (nothing lost, key order, repeats only with the same id)
# must survive.
LEASE = ("--lease-seconds", "3")


@pytest.fixture(params=sorted(DESTINATIONS))
def destination(request: pytest.FixtureRequest) -> Iterator[Destination]:
    make = DESTINATIONS[request.param]
    name = {"nats": brokers.NATS, "redis": brokers.REDIS, "rabbitmq": brokers.RABBITMQ}
    brokers.require(name[request.param])
    made = make()
    yield made
    made.remove()


@pytest.fixture
def relays(database_url: str, tmp_path: Path) -> Iterator[DaemonGroup]:
    with daemon_group(database_url, tmp_path) as group:
        yield group


def leader_of(url: str, pool: list[Daemon]) -> Daemon | None:
    lease = current_leader(url, "sub")
    return next((d for d in pool if lease and d.pid == lease.pid and d.alive()), None)


def wait_for_broker(destination: Destination, count: int, timeout: float = 90) -> None:
    # Seldom: each look is a new broker connection, and the relay needs the CPU.
    what = f"{count} messages in the broker"
    wait_until(lambda: destination.count() >= count, timeout, what, interval=0.5)
    deadline = time.monotonic() + timeout
    while len({entry[0] for entry in destination.read()}) < count:
        if time.monotonic() > deadline:
            return  # check_broker names what is missing
        time.sleep(1.0)


def wait_for_more(destination: Destination, what: str, count: int = 30) -> None:
    published = destination.count()
    wait_until(lambda: destination.count() >= published + count, 60, what, interval=0.2)


def check_broker(url: str, destination: Destination, written: Written) -> None:
    entries = destination.read()
    positions = [entry[0] for entry in entries]
    committed = committed_messages(url, "pub")
    by_text = {str(message.at): message for message in committed}
    got = {Position.parse(p).position for p in positions}
    lost, extra = sorted(written.committed - got), sorted(got - written.committed)
    assert not lost, f"{len(lost)} committed messages never reached the broker: {lost[:10]}"
    assert not extra, f"{len(extra)} rolled-back or unknown messages in the broker: {extra[:10]}"
    assert set(positions) == set(by_text)
    duplicates = len(positions) - len(set(positions))
    if destination.exactly_once:
        assert duplicates == 0, f"{duplicates} duplicates in an exactly-once broker"
    ids: dict[str, str] = {}
    for position, _key, message_id in entries:
        assert ids.setdefault(position, message_id) == message_id, "a repeat with another id"
    # Per-key order, as a consumer dropping repeats by message id sees it.
    seen: set[str] = set()
    last: dict[str | None, Position] = {}
    for position, key, _ in entries:
        if position in seen:
            continue
        seen.add(position)
        at = Position.parse(position)
        assert key == by_text[position].key
        assert last.get(key, Position(0, 0)) < at, f"key {key}: {position} after {last[key]}"
        last[key] = at


@pytest.mark.slow
def test_killed_and_cut_relays_lose_nothing_and_keep_key_order(
    database_url: str, destination: Destination, relays: DaemonGroup
) -> None:
    create_subscription(database_url, "sub", "pub", **SETTINGS)
    rng = random.Random()
    with TcpProxy(destination.address) as proxy:
        to = destination.url(proxy.port)
        pool = [relays.start("sub", *LEASE, relay_to=to) for _ in range(2)]
        with WorkloadLoop(database_url, "pub", WRITERS) as workload:
            for round_ in range(KILLS + 1):
                leader = wait_until(lambda: leader_of(database_url, pool), 60, "a leader")
                wait_for_more(destination, "publishing")
                if round_ == KILLS:
                    proxy.cut()  # every broker connection drops at once
                    wait_for_more(destination, "publishing after the cut")
                    break
                time.sleep(rng.uniform(0.0, 0.3))
                leader.kill()
                pool.remove(leader)
                pool.append(relays.start("sub", *LEASE, relay_to=to))
            written = workload.stop()
        wait_for_broker(destination, len(written.committed))
        last = leader_of(database_url, pool)
        assert last is not None
        assert last.terminate() == 0, relays.logs()
    check_broker(database_url, destination, written)
    assert stored_checkpoint(database_url, "sub") == committed_messages(database_url, "pub")[-1].at
    assert parked(database_url) == 0


@pytest.mark.slow
def test_a_broker_unreachable_for_10_s_parks_nothing_and_resumes(
    database_url: str, relays: DaemonGroup
) -> None:
    brokers.require(brokers.REDIS)
    destination = DESTINATIONS["redis"]()
    create_subscription(database_url, "sub", "pub", **SETTINGS)
    try:
        with TcpProxy(destination.address) as proxy:
            relay = relays.start("sub", *LEASE, relay_to=destination.url(proxy.port))
            with WorkloadLoop(database_url, "pub", WRITERS) as workload:
                wait_for_more(destination, "publishing")
                proxy.refuse()
                outage_began = time.monotonic()
                relay.wait_for_log(r"the broker cannot take messages \(connection\)", 30)
                wait_until(
                    lambda: "destination cannot take messages" in status_text(database_url),
                    15,
                    "outbox status to say the relay is failing",
                )
                while time.monotonic() - outage_began < 10:
                    time.sleep(0.5)
                    # The checkpoint passes nothing unconfirmed: the broker holds where it is
                    # (or it is still at the start, when the outage cut the first run short
                    # before its outcomes came back: it passes nothing then either).
                    stored = {entry[0] for entry in destination.read()}
                    checkpoint = stored_checkpoint(database_url, "sub")
                    assert checkpoint == START or str(checkpoint) in stored
                assert parked(database_url) == 0
                proxy.accept()
                written = workload.stop()
            wait_for_broker(destination, len(written.committed))
            relay.wait_for_log("publishing again", 30)
            assert relay.terminate() == 0, relays.logs()
        check_broker(database_url, destination, written)
        assert parked(database_url) == 0
    finally:
        destination.remove()


def status_text(url: str) -> str:
    done = outbox_command(["status"], url)
    assert done.returncode == 0, done.stderr
    return done.stdout


def parked(url: str) -> int:
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT count(*) FROM outbox.parked_messages").fetchone()
    assert row is not None
    return int(row[0])
