"""What the database shows over time: the stored checkpoint and outbox.subscription_status,
sampled in the background (tests.support.background) on the database's own clock."""

from collections.abc import Generator
from typing import Any, NamedTuple

import psycopg

from outbox.positions import Position
from tests.support.background import BackgroundLoop


class CheckpointSample(NamedTuple):
    observed_at: Any  # the server's clock_timestamp(), comparable with handled_at
    checkpoint: Position
    updated_at: Any
    token: int | None
    holder: str | None
    runtime_at: Any


def checkpoint_log(
    url: str, subscription: str, every: float = 0.02
) -> BackgroundLoop[CheckpointSample]:
    """Samples the stored checkpoint and the lease row every `every` s."""
    return BackgroundLoop("checkpoint-log", _checkpoints(url, subscription), every)


def _checkpoints(url: str, subscription: str) -> Generator[CheckpointSample, None, None]:
    with psycopg.connect(url, autocommit=True) as conn:
        while True:
            # One statement, so the checkpoint and the lease row are one snapshot.
            row = conn.execute(
                "SELECT clock_timestamp(), s.last_processed_transaction_id::text::bigint,"
                " s.last_processed_position, s.updated_at, l.token, l.holder, l.runtime_at"
                " FROM outbox.subscriptions AS s"
                " LEFT JOIN outbox.subscription_leaders AS l USING (subscription_id)"
                " WHERE s.subscription_id = %s",
                (subscription,),
            ).fetchone()
            assert row is not None
            observed_at, tx, pos, updated_at, token, holder, runtime_at = row
            yield CheckpointSample(
                observed_at, Position(tx, pos), updated_at, token, holder, runtime_at
            )


class Status(NamedTuple):
    observed_at: float  # the server's clock_timestamp(), as time.time()
    consumers: int
    in_flight: int
    retry_queue: int
    parked_messages: int
    draining_keys: list[str]


def status_log(url: str, subscription: str, every: float = 0.05) -> BackgroundLoop[Status]:
    """Samples outbox.subscription_status every `every` s (nothing while it has no row)."""
    return BackgroundLoop("status-log", _statuses(url, subscription), every)


def _statuses(url: str, subscription: str) -> Generator[Status | None, None, None]:
    with psycopg.connect(url, autocommit=True) as conn:
        while True:
            row = conn.execute(
                "SELECT extract(epoch FROM clock_timestamp())::float8, consumers,"
                " in_flight, retry_queue, parked_messages, draining_keys"
                " FROM outbox.subscription_status WHERE subscription_id = %s",
                (subscription,),
            ).fetchone()
            yield None if row is None else Status(*row)
