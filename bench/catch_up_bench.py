"""Catch-up subscriptions against the daemon: the drain of one backlog by `poller.subscribe`
(async), `poller.subscribe_sync` (plain code) and `outbox poll`'s daemon with a no-op `def`
handler, beside a bare loop of the read query that decodes each row into a Message (what any
reader of the outbox pays at least)."""

import asyncio
import time

import psycopg

import poller
from bench.common import Measurement
from bench.poller_bench import daemon_drain_rate, fill
from outbox.positions import START
from outbox.queries import QUERIES
from poller.catch_up.signals import CaughtUp
from poller.store.message_reads import message_from_row, prepare_reader

TITLE = "Catch-up subscriptions: drain of a backlog (subscribe, subscribe_sync, the daemon)"
PAGE = 500
BASELINE = "bare read loop"


def run(database_url: str, quick: bool) -> list[Measurement]:
    count = 5_000 if quick else 200_000
    publication = "catch-up"
    fill(database_url, publication, count)
    group = f"drain {count:,} messages"
    rates = {
        BASELINE: bare_loop_rate(database_url, publication, count),
        "subscribe (async)": asyncio.run(subscribe_rate(database_url, publication, count)),
        "subscribe_sync": subscribe_sync_rate(database_url, publication, count),
        "the daemon, def handler": daemon_drain_rate(
            database_url, publication, count, "def handler"
        ),
    }
    notes = {
        BASELINE: "read_batch_with_retired, pages of 500, each row a Message",
        "subscribe_sync": "aim: within 1.5x of the daemon (at least 0.67x its rate)",
    }
    return [
        Measurement(
            group,
            variant,
            rate,
            "msg/s",
            baseline=None if variant == BASELINE else BASELINE,
            note=notes.get(variant, ""),
        )
        for variant, rate in rates.items()
    ]


def bare_loop_rate(database_url: str, publication: str, count: int) -> float:
    """The catch-up read itself, its rows made Messages, nothing else."""
    started = time.perf_counter()
    seen, after = 0, START
    with psycopg.connect(database_url, autocommit=True) as conn:
        prepare_reader(conn)
        while seen < count:
            rows = conn.execute(
                QUERIES["read_batch_with_retired"],
                {"publication": publication, **after.query_parameters("after_"), "limit": PAGE},
                binary=True,
            ).fetchall()
            messages = [message_from_row(row[2:]) for row in rows if row[2] is not None]
            seen += len(messages)
            after = messages[-1].at
    return count / (time.perf_counter() - started)


async def subscribe_rate(database_url: str, publication: str, count: int) -> float:
    started = time.perf_counter()
    seen = 0
    subscription = poller.subscribe(database_url, publication)
    try:
        async for item in subscription:
            if isinstance(item, poller.Message):
                seen += 1
            elif isinstance(item, CaughtUp):
                break
    finally:
        await subscription.aclose()
    return _rate(seen, count, started)


def subscribe_sync_rate(database_url: str, publication: str, count: int) -> float:
    started = time.perf_counter()
    seen = 0
    subscription = poller.subscribe_sync(database_url, publication)
    try:
        for item in subscription:
            if isinstance(item, poller.Message):
                seen += 1
            elif isinstance(item, CaughtUp):
                break
    finally:
        subscription.close()
    return _rate(seen, count, started)


def _rate(seen: int, count: int, started: float) -> float:
    if seen != count:
        raise RuntimeError(f"the subscription caught up after {seen} of {count} messages")
    return count / (time.perf_counter() - started)
