"""A relay's Prometheus metrics, in a registry of its own that the daemon's /metrics serves.

Labelled by the target's masked URL (`relay`), never its credentials.
"""

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

# A confirmed batch takes from a fraction of a millisecond (Redis, local) to the timeout.
PUBLISH_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)


class RelayMetrics:
    def __init__(self, relay: str) -> None:
        self.registry = CollectorRegistry()
        self._published = Counter(
            "outbox_relay_messages_published",
            "Messages the broker confirmed.",
            ["relay"],
            registry=self.registry,
        ).labels(relay)
        self._batches = Counter(
            "outbox_relay_publish_batches",
            "Batches the broker confirmed.",
            ["relay"],
            registry=self.registry,
        ).labels(relay)
        self._latency = Histogram(
            "outbox_relay_publish_seconds",
            "Time from a batch's publish to the broker's confirmation of all of it.",
            ["relay"],
            buckets=PUBLISH_BUCKETS,
            registry=self.registry,
        ).labels(relay)
        self._refused = Counter(
            "outbox_relay_messages_refused",
            "Messages the broker refused for good (parked).",
            ["relay"],
            registry=self.registry,
        ).labels(relay)
        self._errors = Counter(
            "outbox_relay_broker_errors",
            "Batches the broker could not take, by kind (retried with backoff, never parked).",
            ["relay", "kind"],
            registry=self.registry,
        )
        self._failing = Gauge(
            "outbox_relay_failing",
            "1 while the last publish failed because the broker could not take it, else 0.",
            ["relay"],
            registry=self.registry,
        ).labels(relay)
        self._relay = relay

    def published(self, count: int, refused: int, seconds: float) -> None:
        self._published.inc(count - refused)
        self._refused.inc(refused)
        self._batches.inc()
        self._latency.observe(seconds)
        self._failing.set(0)

    def broker_error(self, kind: str) -> None:
        self._errors.labels(self._relay, kind).inc()
        self._failing.set(1)
