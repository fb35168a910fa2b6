"""Relays: publish a subscription's messages to a broker or a webhook.

    import outbox_relays
    handler = outbox_relays.handler("nats://127.0.0.1:4222?subject=orders.{message_type}")

returns a batch handler for the daemon (`outbox relay --to URL` does the same from the
command line). Give the daemon its `close` too (`run_daemon(..., closers=[handler.close])`,
or `DaemonThread`'s): the broker connection belongs to the daemon's event loop and must be
closed on it before the loop ends.

Targets: NATS JetStream, Redis Streams, RabbitMQ, HTTP webhooks; each is one module behind
`outbox_relays.target.Target`, and `outbox_relays.kinds` maps URL schemes to them.
"""

from outbox_relays.kinds import open_target
from outbox_relays.relay import Relay
from outbox_relays.target import BrokerUnavailable, Target
from outbox_relays.target_url import RelayUrlError


def handler(url: str, *, declare: bool = False) -> Relay:
    """A batch handler publishing to `url`; raises RelayUrlError for a URL it cannot take.

    `declare`: create the stream, exchange or queue the URL names when it is missing (the
    relay creates nothing otherwise).
    """
    return Relay(open_target(url, declare=declare))


__all__ = ["BrokerUnavailable", "Relay", "RelayUrlError", "Target", "handler", "open_target"]
