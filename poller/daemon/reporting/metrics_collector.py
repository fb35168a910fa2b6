"""Every family the daemon serves, made when Prometheus scrapes.

The counters and the handler histogram come from the subscriptions' tallies. Nothing on the
delivery path keeps the gauges; two sources give them: the running leadership terms' views
(read on the event loop, where the state machines live) and one short database visit (the
status view, the shard view, the transactions that hold back the safe frontier and committed
messages, and what holds retention back). Either may be unavailable (a busy loop, a
database that is down); a scrape then lacks those families and says so in
`outbox_database_up`, and still answers.
"""

import itertools
import logging
from collections.abc import Iterator
from typing import Any

import psycopg
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from outbox.positions import Position
from poller.daemon.delivery.handler_calls import Ending
from poller.daemon.reporting.metrics import (
    HANDLER_BUCKETS,
    LOOP_ANSWER_TIMEOUT,
    OUTCOMES,
    TIMED_OUT,
    DaemonMetrics,
)
from poller.store.metrics_store import (
    archive_lags,
    blocked_deliveries,
    retention_holds,
    safe_frontier_holder_age,
    subscription_figures,
)
from poller.store.read_server_check import read_server_status
from poller.store.shard_store import shard_statuses

log = logging.getLogger(__name__)

# libpq's smallest connect timeout: a scrape must not hang on a database that is gone.
CONNECT_TIMEOUT_SECONDS = 2
APPLICATION_NAME = "outbox-poller-metrics"

# Blocking transactions shown per subscription, oldest first, and how long one must have been
# open to be shown (see _blocked_figures).
BLOCKERS_PER_SUBSCRIPTION = 3
BLOCKER_MINIMUM_AGE_SECONDS = 5.0


class StateCollector(Collector):
    def __init__(self, metrics: DaemonMetrics, database_url: str) -> None:
        self._metrics = metrics
        self._database_url = database_url

    def collect(self) -> Iterator[Metric]:
        yield from self._handler_figures()
        yield from self._term_figures()
        yield from self._database_figures()

    def _handler_figures(self) -> Iterator[Metric]:
        counters = {
            (Ending.DELIVERED.value,): counter("delivered", "Handler calls that returned."),
            (Ending.FAILED.value, TIMED_OUT): counter(
                "failed", "Handler calls that raised an error or ran past message_timeout."
            ),
            (Ending.SKIPPED.value,): counter("skipped", "Handler calls that raised SkipMessage."),
            (Ending.UNAVAILABLE.value,): counter(
                "destination_unavailable",
                "Handler calls whose destination could not take the message (not an attempt).",
            ),
        }
        retried = counter("retried", "Handler calls of a second or later attempt, at start.")
        parked = counter("parked", "Messages parked (their parked row committed).")
        durations = HistogramMetricFamily(
            "outbox_handler_duration_seconds",
            "Time in the handler, by how the call ended (outcome label).",
            labels=["subscription", "outcome"],
        )
        bounds = [*map(str, HANDLER_BUCKETS), "+Inf"]
        for name, subscription in self._metrics.subscriptions.items():
            tally = subscription.tally.snapshot()
            for outcomes, family in counters.items():
                family.add_metric([name], tally.calls(*outcomes))
            retried.add_metric([name], tally.retried)
            parked.add_metric([name], tally.parked)
            for outcome in OUTCOMES:
                cumulative = itertools.accumulate(tally.buckets[outcome])
                durations.add_metric(
                    [name, outcome],
                    list(zip(bounds, cumulative, strict=True)),
                    tally.sums[outcome],
                )
        yield from (*counters.values(), retried, parked, durations)

    def _term_figures(self) -> Iterator[Metric]:
        try:
            figures, terms = self._metrics.on_loop(self._read_views, LOOP_ANSWER_TIMEOUT)
        except (TimeoutError, RuntimeError):  # a stuck or closed loop: /healthz says which
            log.warning("metrics: the event loop did not answer; no leadership figures")
            return
        families = {
            "leader": gauge("outbox_leader", "1 while this process leads the subscription."),
            "in_flight": gauge("outbox_in_flight_messages", "Messages in a handler now."),
            "buffered": gauge(
                "outbox_buffered_messages",
                "Read and unfinished, not in a handler: queued, backing off or being parked.",
            ),
            "retry_queue": gauge(
                "outbox_retry_queue_messages", "Messages backing off before their next attempt."
            ),
        }
        for subscription, values in figures.items():
            for name, value in values.items():
                families[name].add_metric([subscription], value)
        yield from families.values()
        started = CounterMetricFamily(
            "outbox_leadership_terms",
            "Leadership terms this process started, by shard (a takeover, a restart, a move).",
            labels=["subscription", "shard"],
        )
        for subscription, by_shard in terms.items():
            for shard, count in sorted(by_shard.items()):
                started.add_metric([subscription, shard], count)
        yield started

    def _read_views(self) -> tuple[dict[str, dict[str, float]], dict[str, dict[str, int]]]:
        """On the loop: each subscription's figures (a standby holds nothing, so its are 0),
        and its leadership terms started so far, by shard."""
        figures = {}
        for name, subscription in self._metrics.subscriptions.items():
            view = subscription.view
            figures[name] = {
                "leader": float(view is not None),
                "in_flight": 0.0 if view is None else sum(view.in_flight_by_consumer.values()),
                "buffered": 0.0 if view is None else view.buffered_count,
                "retry_queue": 0.0 if view is None else view.retry_queue_length,
            }
        terms = {
            name: dict(subscription.terms_started)
            for name, subscription in self._metrics.subscriptions.items()
        }
        return figures, terms

    def _database_figures(self) -> Iterator[GaugeMetricFamily]:
        up = gauge("outbox_database_up", "1 if this scrape's database queries answered.", [])
        try:
            with psycopg.connect(
                self._database_url,
                autocommit=True,
                connect_timeout=CONNECT_TIMEOUT_SECONDS,
                application_name=APPLICATION_NAME,
            ) as conn:
                families = list(self._stored_figures(conn))
        except psycopg.Error as error:
            log.warning("metrics: cannot read the subscriptions' figures: %s", error)
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up
        yield from families

    def _stored_figures(self, conn: psycopg.Connection[Any]) -> Iterator[GaugeMetricFamily]:
        transaction = gauge(
            "outbox_checkpoint_transaction_id", "Stored checkpoint: its transaction id."
        )
        position = gauge("outbox_checkpoint_position", "Stored checkpoint: its position.")
        lag_messages = gauge("outbox_lag_messages", "Messages after the stored checkpoint.")
        lag_seconds = gauge(
            "outbox_lag_seconds", "Age of the oldest message after the stored checkpoint."
        )
        parked = gauge("outbox_parked_messages", "Parked messages now.")
        parked_age = gauge(
            "outbox_oldest_parked_age_seconds", "Age of the oldest parked message (0: none)."
        )
        figures = subscription_figures(conn, list(self._metrics.subscriptions))
        for row in figures:
            labels = [row.subscription]
            transaction.add_metric(labels, row.checkpoint.transaction_id)
            position.add_metric(labels, row.checkpoint.position)
            lag_messages.add_metric(labels, row.messages_behind)
            lag_seconds.add_metric(labels, row.oldest_undelivered_age)
            parked.add_metric(labels, row.parked_messages)
            parked_age.add_metric(labels, row.oldest_parked_age)
        yield from (transaction, position, lag_messages, lag_seconds, parked, parked_age)
        yield from self._shard_figures(conn)
        holder = gauge(
            "outbox_safe_frontier_holder_age_seconds",
            "Age of the open transaction that holds back the safe frontier (0: none).",
            [],
        )
        age = safe_frontier_holder_age(conn)
        if age is not None:  # else its session is hidden from this role: no sample, not a 0
            holder.add_metric([], age)
        yield holder
        yield from self._blocked_figures(conn)
        yield from _retention_figures(conn)
        yield from _archive_figures(conn)
        if self._metrics.read_database_url is not None:
            checkpoints = {row.subscription: row.checkpoint for row in figures}
            yield from _read_replica_figures(conn, self._metrics.read_database_url, checkpoints)

    def _blocked_figures(self, conn: psycopg.Connection[Any]) -> Iterator[GaugeMetricFamily]:
        """What holds back committed messages of each subscription, named: the alert on a
        blocked delivery says which session to end. At most BLOCKERS_PER_SUBSCRIPTION series
        per subscription, and only transactions open for BLOCKER_MINIMUM_AGE_SECONDS: the
        writers' ordinary short transactions would make a new series at every scrape."""
        blocked = gauge(
            "outbox_blocked_messages",
            "Committed messages after the checkpoint that wait for older transactions to end.",
        )
        blocking = gauge(
            "outbox_blocking_transaction_age_seconds",
            "Age of an open transaction that holds back committed messages of the subscription.",
            ["subscription", "kind", "pid", "application", "user", "database"],
        )
        for delivery in blocked_deliveries(
            conn,
            list(self._metrics.subscriptions),
            per_subscription=BLOCKERS_PER_SUBSCRIPTION,
            minimum_age_seconds=BLOCKER_MINIMUM_AGE_SECONDS,
        ):
            blocked.add_metric([delivery.subscription], delivery.messages)
            for blocker in delivery.blockers:
                who = (
                    blocker.kind,
                    blocker.pid,
                    blocker.application,
                    blocker.user,
                    blocker.database,
                )
                labels = ["" if value is None else str(value) for value in who]
                blocking.add_metric([delivery.subscription, *labels], blocker.age)
        yield from (blocked, blocking)

    def _shard_figures(self, conn: psycopg.Connection[Any]) -> Iterator[GaugeMetricFamily]:
        """Per shard, as stored (a plain subscription: its one shard, `0/1`). The shard label
        is `SHARD/COUNT`: during a change of the count both layouts have a shard 0."""
        labels = ["subscription", "shard"]
        transaction = gauge(
            "outbox_shard_checkpoint_transaction_id",
            "A shard's stored checkpoint: its transaction id.",
            labels,
        )
        position = gauge(
            "outbox_shard_checkpoint_position", "A shard's stored checkpoint: its position.", labels
        )
        behind = gauge(
            "outbox_shard_messages_behind",
            "Messages of the shard after its checkpoint (a draining shard's: up to the barrier).",
            labels,
        )
        alive = gauge("outbox_shard_leader_alive", "1 while a process leads the shard.", labels)
        draining = gauge(
            "outbox_shard_draining",
            "1 for a shard of the old count during a change of the shard count.",
            labels,
        )
        for shard in shard_statuses(conn, list(self._metrics.subscriptions)):
            values = [shard.subscription, f"{shard.unit.shard}/{shard.unit.shard_count}"]
            transaction.add_metric(values, shard.checkpoint.transaction_id)
            position.add_metric(values, shard.checkpoint.position)
            behind.add_metric(values, shard.messages_behind)
            alive.add_metric(values, shard.leader_alive)
            draining.add_metric(values, shard.draining)
        yield from (transaction, position, behind, alive, draining)


def _retention_figures(conn: psycopg.Connection[Any]) -> Iterator[GaugeMetricFamily]:
    """The same for every daemon of the database (retention is the database's, not a
    subscription's): one series per kind of holder at most."""
    held = gauge(
        "outbox_retention_held_seconds",
        "How long the oldest partition a kind of holder keeps from retention has been held.",
        ["kind", "holder"],
    )
    for hold in retention_holds(conn):
        held.add_metric([hold.kind, hold.holder], hold.seconds)
    yield held


def _archive_figures(conn: psycopg.Connection[Any]) -> Iterator[GaugeMetricFamily]:
    """Per archived publication (the database's, as retention is): what retention waits for."""
    messages = gauge(
        "outbox_archive_lag_messages",
        "Messages of the publication not archived yet (retention keeps them for the archive).",
        ["publication"],
    )
    seconds = gauge(
        "outbox_archive_lag_seconds",
        "Age of the publication's oldest message not archived yet (0: none).",
        ["publication"],
    )
    for lag in archive_lags(conn):
        messages.add_metric([lag.publication], lag.messages)
        seconds.add_metric([lag.publication], lag.seconds)
    yield from (messages, seconds)


def _read_replica_figures(
    conn: psycopg.Connection[Any], read_url: str, checkpoints: dict[str, Position]
) -> Iterator[GaugeMetricFamily]:
    """The hot standby the daemon reads messages from (--read-database-url), on a short
    connection of its own: down or refused, `outbox_read_replica_up` is 0 and the scrape
    still answers with everything else."""
    up = gauge(
        "outbox_read_replica_up",
        "1 if the hot standby messages are read from answered and is a standby of the primary.",
        [],
    )
    try:
        with psycopg.connect(
            read_url,
            autocommit=True,
            connect_timeout=CONNECT_TIMEOUT_SECONDS,
            application_name=APPLICATION_NAME,
        ) as read_conn:
            replica = read_server_status(conn, read_conn, checkpoints)
    except psycopg.Error as error:
        log.warning("metrics: cannot read the read replica's figures: %s", error)
        up.add_metric([], 0)
        yield up
        return
    up.add_metric([], 0 if replica.refused is not None else 1)
    lag_bytes = gauge(
        "outbox_read_replica_lag_bytes",
        "WAL the primary wrote that the hot standby messages are read from has not replayed.",
        [],
    )
    lag_bytes.add_metric([], replica.lag.bytes)
    lag_seconds = gauge(
        "outbox_read_replica_lag_seconds",
        "0 when the hot standby has replayed everything; else the age of the last"
        " transaction it replayed (no sample before it replayed one).",
        [],
    )
    if replica.lag.seconds is not None:
        lag_seconds.add_metric([], replica.lag.seconds)
    waiting = gauge(
        "outbox_read_replica_waiting",
        "1 while the hot standby has not replayed up to the subscription's stored checkpoint:"
        " its reads find nothing and wait.",
    )
    for subscription in checkpoints:
        waiting.add_metric([subscription], float(subscription in replica.waiting))
    yield from (up, lag_bytes, lag_seconds, waiting)


def counter(what: str, help_text: str) -> CounterMetricFamily:
    return CounterMetricFamily(f"outbox_messages_{what}", help_text, labels=["subscription"])


def gauge(name: str, help_text: str, labels: list[str] | None = None) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, help_text, labels=["subscription"] if labels is None else labels)
