"""The relay recipe of the docs (how-to/relays.md) runs as written: the relay inside an
application's process publishes to NATS and, its broker connection closed on the daemon's loop
(`closers`), leaves no task behind (asyncio's "Task was destroyed but it is pending!")."""

import gc
import logging
import re
import threading

import psycopg
import pytest

import outbox
from poller import operations
from tests.support import brokers
from tests.support.broker_streams import nats_stream
from tests.support.daemons import wait_until
from tests.support.documentation import page

RELAYS = page("how-to/relays.md")
RECIPE_URL = "nats://127.0.0.1:4222?subject=orders.{message_type}"


def relay_recipe() -> str:
    blocks: list[str] = re.findall(r"```python\n(.*?)```", RELAYS.read_text(), re.S)
    (recipe,) = [block for block in blocks if "outbox_relays.handler(" in block]
    assert "closers=[relay.close]" in recipe
    return recipe


def test_the_readme_relay_recipe_publishes_and_leaves_no_task_behind(
    database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    brokers.require(brokers.NATS)
    destination = nats_stream()  # a stream of this test's own: the broker is shared
    recipe = relay_recipe()
    assert RECIPE_URL in recipe
    namespace: dict[str, object] = {"DATABASE_URL": database_url}
    exec(
        compile(recipe.replace(RECIPE_URL, destination.url(brokers.NATS[2])), str(RELAYS), "exec"),
        namespace,
    )
    with psycopg.connect(database_url, autocommit=True) as conn:
        operations.create(conn, "to-nats", "orders", "start", {})
        outbox.append(conn, "orders", "OrderPlaced", {"id": 1}, partition_key="c-1")
    stop = threading.Event()
    caplog.set_level(logging.ERROR, logger="asyncio")
    relaying = threading.Thread(target=namespace["relay_to_nats"], args=(stop,))  # type: ignore[arg-type]
    relaying.start()
    try:
        wait_until(lambda: destination.count() >= 1, 30, "the message on NATS")
    finally:
        stop.set()
        relaying.join(30)
        destination.remove()
    assert not relaying.is_alive()
    gc.collect()  # a task left pending is reported when it is collected
    assert [r.getMessage() for r in caplog.records if r.name == "asyncio"] == []
