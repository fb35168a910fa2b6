"""Taking a leader's lease over, on a real PostgreSQL. What a leader's store does with the lease
once held (every write fenced by its token and, where it has one, by the epoch the write was
issued in) is the term store's contract: tests/integration/test_leader_store_contract.py."""

import psycopg
import pytest

from poller import operations
from poller.store.leader_store import LeaderStore, try_acquire
from poller.store.records import Lease

pytestmark = pytest.mark.asyncio


async def leader(url: str, holder: str) -> tuple[LeaderStore, float | None]:
    # The holder id is the session's application_name: a standby may take over once the
    # holder's session is gone, which is how each step here changes hands.
    conn = await psycopg.AsyncConnection.connect(url, autocommit=True, application_name=holder)
    lease = Lease("sub", holder, ttl_seconds=30)
    left = await try_acquire(conn, lease)
    return LeaderStore(conn, conn, lease), left


async def test_a_takeover_of_a_live_lease_says_how_long_it_had_left(database_url: str) -> None:
    with psycopg.connect(database_url, autocommit=True) as conn:
        operations.create(conn, "sub", "orders", "start", {})
    await leader(database_url, "outbox-poller:gone")
    # Its session is not named in pg_stat_activity any more, as after a kill or a cut.
    with psycopg.connect(database_url) as conn:
        conn.execute("UPDATE outbox.subscription_leaders SET holder = 'outbox-poller:vanished'")
    _, left = await leader(database_url, "outbox-poller:next")
    assert left is not None
    assert 25 < left <= 30
    # Taking back one's own lease (a reconnect) waits for nobody.
    _, again = await leader(database_url, "outbox-poller:next")
    assert again == 0.0
