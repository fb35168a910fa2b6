"""A subscription's coordinator driven through the in-memory database: it runs a worker for
each shard the assignment gives this process, stops the ones dealt to another, starts none
beside a handler call a stopped one left running, and leaves the group when stopped. How
processes share shards over a real database is tests/acceptance/test_sharded_daemons.py's."""

import math
import threading

from poller.membership import Layout, Member, ShardUnit, assign
from poller.message import Message
from tests.unit.daemon.process_support import running_coordinator
from tests.unit.daemon.subscription_database_fake import (
    ELSEWHERE,
    HOLDER,
    FakeSubscriptionDatabase,
)
from tests.unit.daemon.term_support import WAIT, renewals, until


def dealt(layout: Layout, *members: str) -> set[ShardUnit]:
    """The shards `assign` gives this process among `members`."""
    group = [Member(member, math.inf) for member in members]
    return set(assign(layout, group, 0.0)[HOLDER])


def nothing(message: Message) -> None:
    pass


async def test_a_coordinator_runs_the_shards_dealt_to_it_and_stops_those_dealt_elsewhere() -> None:
    layout = Layout(4)
    database = FakeSubscriptionDatabase(layout)
    every = set(layout.units())
    mine = dealt(layout, HOLDER, ELSEWHERE)
    assert set() < mine < every  # the premise: the shards are split
    async with running_coordinator(database, nothing) as coordinator:
        await until(lambda: database.leaders() == every, "it leads every shard alone")
        database.others = [ELSEWHERE]
        gone = every - mine
        await until(lambda: set(database.writes_released) == gone, "the others' workers ended")
        assert all(database.store(unit).released for unit in gone)  # stopped gracefully
        assert database.leaders() == mine
        for unit in mine:
            await renewals(database.store(unit), 2)  # still leading
        await coordinator.stopped()


async def test_a_shard_starts_again_only_once_its_stopped_workers_call_returned() -> None:
    """A term that lost its lease leaves its handler call running (a thread cannot be
    stopped), and a worker stopped while it waits for it ends at once: a new worker of the
    shard here would take the lease back and start the call's key beside it."""
    layout = Layout(2)
    database = FakeSubscriptionDatabase(layout)
    [moved] = set(layout.units()) - dealt(layout, HOLDER, ELSEWHERE)
    database.store(moved).append("a")
    started, go_on = threading.Event(), threading.Event()

    def handle(message: Message) -> None:  # noqa: ARG001
        started.set()
        go_on.wait(WAIT)

    def taken() -> int:
        return sum(unit == moved for unit, _ in database.acquired)

    async with running_coordinator(database, handle) as coordinator:
        await until(started.is_set, "a's handler runs")
        database.led_elsewhere(moved)  # the term loses its lease
        database.others = [ELSEWHERE]  # and the shard is dealt to the other process
        await until(lambda: moved in database.writes_released, "its worker stopped")
        # The other process gives the shard back and leaves.
        database.released_elsewhere(moved)
        database.others = []
        seen = database.renewals
        await until(lambda: database.renewals >= seen + 5, "five membership renewals")
        assert taken() == 1
        go_on.set()
        await until(lambda: taken() == 2, "the shard is started again")
        await coordinator.stopped()


async def test_a_stopped_coordinator_leaves_the_group_and_its_shards_release_their_leases() -> None:
    layout = Layout(2)
    database = FakeSubscriptionDatabase(layout)
    async with running_coordinator(database, nothing) as coordinator:
        await until(lambda: database.leaders() == set(layout.units()), "it leads both shards")
        assert not database.left
        await coordinator.stopped()
    assert database.left
    assert database.leaders() == set()
    assert all(database.store(unit).released for unit in layout.units())
    assert database.closed
