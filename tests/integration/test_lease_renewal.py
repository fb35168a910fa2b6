"""A process's renewal of all it holds of a subscription, in one statement
(poller/store/lease_renewal.py): every lease still its own is extended, an expired one that
nobody took too (same holder, same token), a taken one is not; the runtime figures given land
with it; the membership is renewed until the process leaves."""

import time
from typing import Any

import psycopg
import pytest

import outbox
from poller import operations
from poller.daemon.options import DaemonOptions
from poller.membership import ShardUnit
from poller.message import Message
from poller.store.leader_store import try_acquire
from poller.store.lease_renewal import HeldLease, ProcessRenewal, renew_process_leases
from poller.store.records import Lease
from tests.support.inprocess import running_daemon

HOLDER = "outbox-poller:renewing"
OTHER = "outbox-poller:other"
UNITS = [ShardUnit(4, shard) for shard in range(4)]

# A lease of 1 s, renewed every 0.25 s: a term stops starting deliveries 0.75 s after the last
# renewal sent. Each shard's run of ~15 messages holds the loop ~1.5 s.
HELD_LOOP = DaemonOptions(
    lease_seconds=1.0, renew_every=0.25, standby_poll=0.1, shutdown_timeout=5.0
)
MESSAGES = 60
HANDLER_SECONDS = 0.1


async def taken(conn: psycopg.AsyncConnection[Any], holder: str, unit: ShardUnit) -> int:
    lease = Lease("sub", holder, ttl_seconds=30, unit=unit)
    assert await try_acquire(conn, lease) is not None
    assert lease.token is not None
    return lease.token


async def renew(
    conn: psycopg.AsyncConnection[Any], leases: list[HeldLease], *, member: bool = True
) -> ProcessRenewal | None:
    return await renew_process_leases(conn, "sub", HOLDER, "host", 1, 30.0, leases, member=member)


def stored(url: str, query: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(url) as conn:
        return conn.execute(query).fetchall()


@pytest.mark.asyncio
async def test_one_statement_renews_every_lease_still_held_and_no_other(
    database_url: str,
) -> None:
    with psycopg.connect(database_url, autocommit=True) as conn:
        operations.create(conn, "sub", "orders", "start", {}, 4)
    async with (
        await psycopg.AsyncConnection.connect(
            database_url, autocommit=True, application_name=HOLDER
        ) as mine,
        await psycopg.AsyncConnection.connect(
            database_url, autocommit=True, application_name=OTHER
        ) as other,
    ):
        tokens = [await taken(mine, HOLDER, unit) for unit in UNITS]
        # Every lease expired (a renewer that got no turn); another process took the last.
        with psycopg.connect(database_url) as admin:
            admin.execute(
                "UPDATE outbox.subscription_leaders"
                " SET expires_at = clock_timestamp() - interval '1 second'"
            )
        assert await taken(other, OTHER, UNITS[3]) == tokens[3] + 1

        held = [HeldLease(unit, token) for unit, token in zip(UNITS, tokens, strict=True)]
        held[0] = HeldLease(UNITS[0], tokens[0], {"in_flight": 3})
        renewal = await renew(mine, held)

    assert renewal is not None
    states = [renewal.leases[unit, token] for unit, token in zip(UNITS, tokens, strict=True)]
    assert all(state is not None for state in states[:3])
    assert states[3] is None
    alive = stored(
        database_url,
        "SELECT shard, holder, token, runtime FROM outbox.subscription_leaders"
        " WHERE expires_at > clock_timestamp() ORDER BY shard",
    )
    assert alive == [
        (0, HOLDER, tokens[0], {"in_flight": 3}),
        (1, HOLDER, tokens[1], {}),  # none given: kept
        (2, HOLDER, tokens[2], {}),
        (3, OTHER, tokens[3] + 1, {}),
    ]
    assert [m.member for m in renewal.group.members] == [HOLDER]
    assert renewal.group.layout.shard_count == 4


@pytest.mark.asyncio
async def test_a_process_that_left_renews_its_leases_but_not_its_membership(
    database_url: str,
) -> None:
    with psycopg.connect(database_url, autocommit=True) as conn:
        operations.create(conn, "sub", "orders", "start", {}, 4)
    async with await psycopg.AsyncConnection.connect(
        database_url, autocommit=True, application_name=HOLDER
    ) as conn:
        token = await taken(conn, HOLDER, UNITS[0])
        renewal = await renew(conn, [HeldLease(UNITS[0], token)], member=False)
        assert renewal is not None
        assert renewal.leases[UNITS[0], token] is not None
        assert stored(database_url, "SELECT member FROM outbox.subscription_members") == []
        with psycopg.connect(database_url, autocommit=True) as admin:
            operations.delete(admin, "sub")
        assert await renew(conn, [HeldLease(UNITS[0], token)]) is None


def test_leases_outlast_handler_work_that_holds_the_event_loop_longer(database_url: str) -> None:
    """Handler work keeps the event loop from running for longer than a lease lasts: here an
    `async def` handler computing without awaiting, the extreme of what a CPU-bound `def`
    handler does to the loop (87% of the GIL to the handler threads, 9% to the loop). The
    renewer renews every lease from its own thread meanwhile, so none is lost and nothing is
    delivered twice. Before, each term renewed on the loop: the fences lapsed, the terms
    ended, the leases were taken again and messages were handled again."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        operations.create(conn, "sub", "orders", "start", {"strategy": "pinned", "consumers": 1}, 4)
        with conn.transaction():  # read at once: each shard's messages make one long run
            for n in range(MESSAGES):
                outbox.append(conn, "orders", "T", {"n": n}, partition_key=f"key-{n}")
    handled: list[str] = []

    async def computing(message: Message) -> None:
        until = time.monotonic() + HANDLER_SECONDS
        while time.monotonic() < until:
            pass
        handled.append(message.message_id)

    with running_daemon(database_url, ["sub"], computing, HELD_LOOP):
        deadline = time.monotonic() + 60
        while len(set(handled)) < MESSAGES:
            assert time.monotonic() < deadline, f"{len(set(handled))} of {MESSAGES} handled"
            time.sleep(0.05)
        # Read before the stop releases them: each is still the first one taken.
        tokens = stored(database_url, "SELECT token FROM outbox.subscription_leaders")
    assert len(handled) == MESSAGES, "handled again"
    assert sorted(tokens) == [(1,)] * 4, "a lease was taken again"
