"""Every target, pointed at a port nothing listens on: an outage (BrokerUnavailable of kind
connection) within seconds, never another exception, and never the password, the token or
any other part of the user-info in what it says or in its name."""

import time

import pytest

from outbox_relays.kinds import open_target
from outbox_relays.target import BrokerUnavailable
from tests.support.relay_messages import made_messages

SECRET = "s3cret-of-the-test"


@pytest.mark.parametrize(
    "url",
    [
        f"nats://relay:{SECRET}@127.0.0.1:1?subject=orders.out",
        f"redis://user:{SECRET}@127.0.0.1:1/0?stream=orders",
        f"amqp://guest:{SECRET}@127.0.0.1:1/?exchange=orders",
        f"http://user:{SECRET}@127.0.0.1:1/hook",
        f"nats://{SECRET}@127.0.0.1:1?subject=orders.out",  # a token
        f"redis://user:{SECRET}/x@127.0.0.1:1/0?stream=orders",  # an unencoded '/'
        f"amqp://guest:{SECRET}@x@127.0.0.1:1/?exchange=orders",  # an unencoded '@'
    ],
)
async def test_a_closed_port_is_a_connection_failure_quickly(url: str) -> None:
    target = open_target(url)
    started = time.monotonic()
    with pytest.raises(BrokerUnavailable) as raised:
        await target.publish(made_messages(1))
    await target.close()
    assert time.monotonic() - started < 5
    assert raised.value.kind == "connection"
    assert "127.0.0.1:1" in raised.value.reason
    assert SECRET not in raised.value.reason
    assert SECRET not in target.name
    assert "user" not in target.name
    assert "://***@127.0.0.1:1" in target.name
