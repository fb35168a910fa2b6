"""The relay as the daemon runs it: a broker that stops answering is an outage whatever the
subscription's message_timeout and the relay's timeout= are, so nothing is counted or parked
and the status view says why."""

import socket
from collections.abc import Iterator

import pytest

import outbox_relays
from tests.integration.test_daemon import append, subscribe, wait_for
from tests.integration.test_daemon_unavailable import destination_unavailable, parked_count
from tests.support.inprocess import running_daemon


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port that takes connections (the kernel's backlog) and never answers: a hung broker."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        yield listener.getsockname()[1]


@pytest.mark.parametrize("kind", ["redis", "nats"])
def test_a_hung_broker_with_message_timeout_below_timeout_parks_nothing(
    database_url: str, silent_port: int, kind: str
) -> None:
    # One attempt: a timed-out call counted as a failure would park at once.
    subscribe(
        database_url,
        message_timeout=0.5,
        max_retry_count=1,
        retry_backoff_initial=0.01,
        retry_backoff_max=0.05,
    )
    url = {
        "redis": f"redis://127.0.0.1:{silent_port}/0?stream=s&timeout=30",
        "nats": f"nats://127.0.0.1:{silent_port}?subject=s&timeout=30",
    }[kind]
    relay = outbox_relays.handler(url)
    append(database_url, 5)
    with running_daemon(database_url, ["sub"], relay):
        wait_for(lambda: "no answer within" in (destination_unavailable(database_url) or ""))
        errors = "outbox_relay_broker_errors_total"
        wait_for(
            lambda: (
                (
                    relay.metrics.registry.get_sample_value(
                        errors, {"relay": relay.target.name, "kind": "timeout"}
                    )
                    or 0
                )
                >= 3
            )
        )
        assert parked_count(database_url) == 0
