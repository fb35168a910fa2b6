"""A process's connections for one subscription are lost together (shared_connection.py):
once one is found dead, each other is checked before its next use. Before, a term started
after an operator terminated the process's sessions ran on a connection killed with the
others, and ended again the moment it used it: one kill, two lost terms."""

import asyncio

import psycopg
import pytest

from poller.daemon.process.shared_connection import ConnectionGroup, SharedConnection
from poller.reconnect import Backoff, Reconnector

pytestmark = pytest.mark.asyncio

NAME = "outbox-poller:connection-loss-test"


def terminate_sessions(url: str) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = current_database() AND application_name LIKE %s",
            (NAME + "%",),
        ).fetchall()
    return len(rows)


def shared(url: str, group: ConnectionGroup | None) -> SharedConnection:
    return SharedConnection(Reconnector(url, NAME, "test"), group)


async def until_closed(conn: psycopg.AsyncConnection[object]) -> None:
    """Until a statement finds the terminated session gone (the server closes it at once, the
    client learns on its next statement)."""
    for _ in range(100):
        try:
            await conn.execute("SELECT 1")
        except psycopg.OperationalError:
            return
        await asyncio.sleep(0.05)
    raise AssertionError("the terminated session still answered")


@pytest.mark.parametrize("grouped", [True, False], ids=["grouped", "apart"])
async def test_one_connection_found_lost_has_its_group_checked_before_use(
    database_url: str, grouped: bool
) -> None:
    stop = asyncio.Event()
    group = ConnectionGroup() if grouped else None
    writes, reads = shared(database_url, group), shared(database_url, group)
    try:
        write_conn = await writes.get(stop)
        read_conn = await reads.get(stop)
        assert terminate_sessions(database_url) == 2
        await until_closed(write_conn)
        assert (await writes.get(stop)) is not write_conn  # found lost: reopened
        answer = await reads.get(stop)
        if grouped:
            assert answer is not read_conn
            assert await (await answer.execute("SELECT 1")).fetchone() == (1,)
        else:
            # Apart, nothing tells the other connection: the next statement is the first to
            # find it dead, which is what ended a second term.
            assert answer is read_conn
            with pytest.raises(psycopg.OperationalError):
                await answer.execute("SELECT 1")
    finally:
        await writes.close()
        await reads.close()


async def test_a_check_does_not_reopen_a_healthy_connection(database_url: str) -> None:
    stop = asyncio.Event()
    group = ConnectionGroup()
    writes, reads = shared(database_url, group), shared(database_url, group)
    try:
        await writes.get(stop)
        read_conn = await reads.get(stop)
        # Only `writes` is lost (its own session terminated): `reads` is checked, and kept.
        write_conn = await writes.get(stop)
        pid = write_conn.info.backend_pid
        with psycopg.connect(database_url, autocommit=True) as conn:
            conn.execute("SELECT pg_terminate_backend(%s)", (pid,))
        await until_closed(write_conn)
        await writes.get(stop)
        assert (await reads.get(stop)) is read_conn
        assert await (await read_conn.execute("SELECT 1")).fetchone() == (1,)
    finally:
        await writes.close()
        await reads.close()


class CountedBackoff(Backoff):
    """The reconnect policy's backoff, saying each wait it gives."""

    def __init__(self) -> None:
        super().__init__()
        self.waits: list[float] = []

    def failed(self, now: float) -> float:
        wait = super().failed(now)
        self.waits.append(wait)
        return wait


async def test_a_lost_connection_is_opened_again_without_a_wait_of_its_own(
    database_url: str,
) -> None:
    """One loss, one backoff: the task that finds the connection lost (a shard's worker, the
    lease renewer, the coordinator) backs off before it asks again. The connection waited a
    backoff of its own too before reopening: a worker's lost connection waited two."""
    stop = asyncio.Event()
    backoff = CountedBackoff()
    writes = SharedConnection(Reconnector(database_url, NAME, "test", backoff=backoff))
    try:
        conn = await writes.get(stop)
        assert terminate_sessions(database_url) == 1
        await until_closed(conn)
        assert (await writes.get(stop)) is not conn
        assert backoff.waits == []
    finally:
        await writes.close()
