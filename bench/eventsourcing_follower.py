"""eventsourcing's follower, the load group's second baseline (the `bench` dependency group).

What a user of eventsourcing 9.5 runs to follow an application's events from another
process: a `ProjectionRunner`, whose subscription wakes on the application's NOTIFY and reads
the events after its last one (`PostgresSubscription`), handing each to a projection. Here
the projection notes when it had each event (bench/handled_times.py) and tracks it in an
in-memory view, as the daemon's no-op handler keeps nothing either. The writers save one
aggregate per transaction through the application (`Application.save`: its recorder takes
its EXCLUSIVE table lock and NOTIFYs, which is how eventsourcing keeps readers from passing
a row that commits late; every writer waits for that lock in turn).

`python -m bench.eventsourcing_follower` runs the follower until SIGTERM, on the database
at $OUTBOX_BENCH_URL (bench/consumer_processes.py starts it).
"""

import os
import signal
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any

import psycopg
from eventsourcing.application import Application
from eventsourcing.dispatch import singledispatchmethod
from eventsourcing.domain import Aggregate, event
from eventsourcing.persistence import Tracking
from eventsourcing.popo import POPOTrackingRecorder
from eventsourcing.projection import Projection, ProjectionRunner
from psycopg.conninfo import conninfo_to_dict

from bench import handled_times

EVENTS_TABLE = "benchevents_events"
"""The table eventsourcing names after the application (`BenchEvents`)."""

FILL_BATCH = 1000


class Written(Aggregate):
    """One message: an aggregate created and saved in one transaction."""

    @event("Written")
    def __init__(self, message_id: str) -> None:
        self.message_id = message_id

    @staticmethod
    def create_id(message_id: str) -> uuid.UUID:
        return event_id(message_id)


def event_id(message_id: str) -> uuid.UUID:
    """The aggregate id a message id gets: what the follower sees of it."""
    return uuid.uuid5(uuid.NAMESPACE_URL, message_id)


class BenchEvents(Application[uuid.UUID]):
    """The application whose events are followed."""


class HandledTimes(POPOTrackingRecorder):
    """The projection's view: tracking kept in memory."""


class NoteHandled(Projection[HandledTimes]):
    name = "follower"

    @singledispatchmethod
    def process_event(self, domain_event: Any, tracking: Tracking) -> None:
        handled_times.note(str(domain_event.originator_id))
        self.view.insert_tracking(tracking)


def environment(url: str) -> dict[str, str]:
    """eventsourcing's settings for the database at `url` (a socket directory is a host to
    libpq as well); the follower's view in memory."""
    parts = conninfo_to_dict(url)
    return {
        "PERSISTENCE_MODULE": "eventsourcing.postgres",
        "POSTGRES_DBNAME": str(parts.get("dbname", "postgres")),
        "POSTGRES_HOST": str(parts.get("host", "localhost")),
        "POSTGRES_PORT": str(parts.get("port", "5432")),
        "POSTGRES_USER": str(parts.get("user", "postgres")),
        "POSTGRES_PASSWORD": str(parts.get("password", "")),
        "POSTGRES_SCHEMA": "public",
        f"{NoteHandled.name.upper()}_PERSISTENCE_MODULE": "eventsourcing.popo",
    }


def empty_table(url: str) -> None:
    """The events table, made when missing (by the application, as its writers would) and
    emptied, its notification ids restarted: each run starts as on a fresh database."""
    BenchEvents(environment(url)).close()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"TRUNCATE public.{EVENTS_TABLE} RESTART IDENTITY")


def fill(url: str, prefix: str, count: int) -> None:
    """A backlog of `count` events, FILL_BATCH to a transaction."""
    fill_with(url, [f"{prefix}-{n}" for n in range(count)])


def fill_with(url: str, message_ids: list[str]) -> None:
    """An event for each message id, FILL_BATCH to a transaction."""
    application = BenchEvents({**environment(url), "CREATE_TABLE": "false"})
    try:
        for start in range(0, len(message_ids), FILL_BATCH):
            batch = message_ids[start : start + FILL_BATCH]
            application.save(*(Written(message_id) for message_id in batch))
    finally:
        application.close()


_applications: dict[str, BenchEvents] = {}


@dataclass(frozen=True)
class PacedEvents:
    """A writer process's command (bench/load_writers.py): save one event per transaction
    at `rate` per second from `start` to `end`, as `Paced` appends to the outbox; returns
    (the event's aggregate id, the time the save was due, commit time) for each."""

    url: str
    publication: str
    rate: float
    start: float
    end: float
    writers: int

    def run(self, _conn: Any, writer: int) -> list[tuple[str, float, float]]:
        application = _applications.get(self.url)
        if application is None:
            # One connection, as the outbox's writers have: eventsourcing's pool opens 5
            # by default, and 16 writers' 80 left the server none for the consumer.
            settings = {
                **environment(self.url),
                "CREATE_TABLE": "false",
                "POSTGRES_POOL_SIZE": "1",
                "POSTGRES_MAX_OVERFLOW": "0",
            }
            application = _applications[self.url] = BenchEvents(settings)
        interval = 1 / self.rate
        offset = writer / self.writers
        committed: list[tuple[str, float, float]] = []
        n = 0
        while (due := self.start + (n + offset) * interval) < self.end:
            wait = due - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            written = Written(f"{self.publication}-{writer}-{n}")
            application.save(written)
            committed.append((str(written.id), due, time.monotonic()))
            n += 1
        return committed


def follow() -> None:
    """Run the follower from the first event until SIGTERM (the environment configures it)."""
    stopped = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopped.set())
    handled_times.start_flushing()
    env = {**environment(os.environ["OUTBOX_BENCH_URL"]), "CREATE_TABLE": "false"}
    with ProjectionRunner(
        application_class=BenchEvents,
        projection_class=NoteHandled,
        view_class=HandledTimes,
        env=env,
    ) as runner:
        while not stopped.wait(0.1):
            runner.run_forever(timeout=0)  # raises what ended the runner


if __name__ == "__main__":
    follow()
