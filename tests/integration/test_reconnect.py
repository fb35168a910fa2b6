"""The one async connect (poller.reconnect.Reconnector) against real sockets: it gives up the
moment its stop is set, whether the server refuses connections or does not answer at all,
says an outage once and its end once, and reaches a server that comes back."""

import asyncio
import logging
import time

import pytest

from poller.reconnect import Reconnector
from poller.waits import Stopped
from tests.support.databases import server_address, through_port
from tests.support.tcp_proxy import TcpProxy


async def stopped_within(reconnector: Reconnector, stop: asyncio.Event, after: float) -> float:
    """Set `stop` `after` seconds into `connect()`; how long connect then took to give up."""
    asyncio.get_running_loop().call_later(after, stop.set)
    started = time.monotonic()
    with pytest.raises(Stopped):
        await reconnector.connect()
    return time.monotonic() - started - after


@pytest.mark.parametrize("outage", ["refused", "unanswered"])
async def test_connect_gives_up_at_once_when_stopped(
    database_url: str, outage: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="poller.reconnect")
    with TcpProxy(server_address(database_url)) as proxy:
        if outage == "refused":
            proxy.refuse()
        else:
            proxy.blackhole()
        stop = asyncio.Event()
        reconnector = Reconnector(through_port(database_url, proxy.port), "test", "w", stop=stop)
        # Long enough for several refused attempts; an unanswered one waits 130 s by itself.
        assert await stopped_within(reconnector, stop, after=1.0) < 0.2
    said = [(r.levelname, r.getMessage()) for r in caplog.records if r.levelno >= logging.INFO]
    if outage == "refused":
        assert len([r for r in caplog.records if "cannot reach" in r.getMessage()]) > 3
        assert [level for level, _ in said] == ["WARNING", "INFO"], said  # once, not per try
        assert said[1][1] == "w: stopping without waiting for the database"
    else:
        assert said == [], said  # one attempt, still waiting: nothing failed yet


async def test_a_server_that_comes_back_is_reached_and_said(
    database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="poller.reconnect")
    with TcpProxy(server_address(database_url)) as proxy:
        proxy.refuse()
        reconnector = Reconnector(through_port(database_url, proxy.port), "test", "w")
        connecting = asyncio.ensure_future(reconnector.connect())
        async with asyncio.timeout(10):
            while not caplog.records:  # the first refused attempt, said
                await asyncio.sleep(0.02)
        proxy.accept()
        async with await connecting as conn:
            assert await (await conn.execute("SELECT 1")).fetchone() == (1,)
    messages = [r.getMessage() for r in caplog.records]
    assert messages[0].startswith("w: cannot reach the database (")
    assert messages[-1].startswith("w: reached the database again after ")
