"""A shard's worker driven through the in-memory database: it stands by while another process
leads, waits out a lease it took over, starts a term again when one asks, and ends when told
to stop or when its subscription is deleted. Connection errors' backoff, the read server's
checks and a restored copy are the database tests' (tests/integration/test_daemon.py)."""

import dataclasses
import time

from poller.membership import ONLY_SHARD
from tests.unit.daemon.process_support import PROCESS, running_worker, timed
from tests.unit.daemon.subscription_database_fake import FakeSubscriptionDatabase
from tests.unit.daemon.term_support import EVERY_MESSAGE, handled, recording, until


async def test_a_worker_stands_by_while_another_process_leads_and_leads_once_it_is_free() -> None:
    database = FakeSubscriptionDatabase()
    store = database.store()
    store.settings = dict(EVERY_MESSAGE)
    messages = store.append("a", "b")
    database.led_elsewhere()
    async with running_worker(database, recording(store.journal)) as worker:
        await until(lambda: database.refused[ONLY_SHARD] >= 3, "three attempts refused")
        assert database.acquired == []
        assert store.calls == []  # no term ran
        database.released_elsewhere()
        await until(lambda: store.checkpoint == messages[-1].at, "both are passed")
        await worker.stopped()
    assert handled(store.journal) == [m.at for m in messages]
    assert store.released


async def test_a_takeover_of_an_unexpired_lease_waits_it_out_before_any_delivery() -> None:
    database = FakeSubscriptionDatabase()
    database.store().append("a")
    lapses_at = time.monotonic() + 0.2
    # Its holder's session is gone (killed, partitioned): taken over at once, 0.2 s left.
    database.led_elsewhere(seconds=0.2, session_alive=False)
    handled_at: list[float] = []
    async with running_worker(database, timed(handled_at)) as worker:
        await until(lambda: handled_at, "a is handled")
        await worker.stopped()
    [(_, taken_at)] = database.acquired
    assert taken_at < lapses_at <= handled_at[0]


async def test_a_term_cut_short_in_the_wait_and_its_lease_taken_again_waits_the_rest() -> None:
    """Re-taking its own lease, the worker is told 0 s left: the wait is the process's."""
    database = FakeSubscriptionDatabase()
    store = database.store()
    store.append("a")
    lapses_at = time.monotonic() + 0.3
    database.led_elsewhere(seconds=0.3, session_alive=False)
    handled_at: list[float] = []
    async with running_worker(database, timed(handled_at)) as worker:
        await until(lambda: database.acquired, "the lease is taken over")
        store.cut_connection()
        await until(lambda: len(database.acquired) == 2, "the lease is taken again")
        assert time.monotonic() < lapses_at  # the premise: taken again within the wait
        await until(lambda: handled_at, "a is handled")
        await worker.stopped()
    assert lapses_at <= handled_at[0]


async def test_a_restart_the_term_asks_for_starts_a_new_term_from_the_stored_checkpoint() -> None:
    database = FakeSubscriptionDatabase()
    store = database.store()
    store.settings = dict(EVERY_MESSAGE)
    first = store.append("a", "b")
    async with running_worker(database, recording(store.journal)) as worker:
        await until(lambda: store.checkpoint == first[-1].at, "a and b are passed")
        store.update_settings(max_retry_count=3)  # not the consumer count: a new term
        await until(lambda: len(database.loaded) == 2, "a second term loaded the subscription")
        later = store.append("c")
        await until(lambda: store.checkpoint == later[-1].at, "c is passed")
        await worker.stopped()
    # Each once: the second term started after what the first one checkpointed.
    assert handled(store.journal) == [m.at for m in first + later]
    assert [unit for unit, _ in database.acquired] == [ONLY_SHARD, ONLY_SHARD]


async def test_a_deleted_subscription_ends_its_worker() -> None:
    database = FakeSubscriptionDatabase()
    store = database.store()
    store.settings = dict(EVERY_MESSAGE)
    [message] = store.append("a")
    async with running_worker(database, recording(store.journal)) as worker:
        await until(lambda: store.checkpoint == message.at, "a is passed")
        database.delete_subscription()
        await worker.ended()
        assert not worker.stop.is_set()
    assert database.writes_released == [ONLY_SHARD]


async def test_a_stop_ends_a_worker_standing_by_at_once() -> None:
    database = FakeSubscriptionDatabase()
    database.led_elsewhere()
    # It would try the lease again only in a minute: the stop must not wait for that.
    patient = dataclasses.replace(PROCESS, standby_poll=60.0)
    async with running_worker(database, recording([]), patient) as worker:
        await until(lambda: database.refused[ONLY_SHARD] == 1, "the first attempt is refused")
        began = time.monotonic()
        await worker.stopped()
        assert time.monotonic() - began < 0.5
    assert database.writes_released == [ONLY_SHARD]
    assert not database.store().released  # still the other process's
