"""The `load` group's rounds, and where a message waits between its commit and its handler.

A setting (a rate of the 16 writers) runs every consumer in turn, in three interleaved rounds,
each on a fresh publication (a drift in machine load falls on all alike). Percentiles pool the
rounds; each round's figure is in the note.

Commit-to-handler splits in three:
(a) commit to frontier: until every transaction with a lower transaction id has ended, so the
    row is below pg_snapshot_xmin. Counted from the writers' side afterwards: each row's
    transaction id is read back from the table, and a row passes the frontier when the last
    writer transaction at or below its id committed. Transactions of other sessions (the
    daemon's checkpoints and lease renewals, anything else on the server) are not seen, so
    (a) is a lower bound and their share shows in (b).
(b) frontier to read: until the consumer's read returns the row (its poll interval, back-off
    or hidden-row re-check, and the read itself).
(c) read to handler: the daemon's hop from its read to the handler call.
The read time is taken where the daemon's leader store returns a read (a wrapper put around
`LeaderStore.read_batch` for the run); the bare loop handles a row where it reads it. A
consumer in another process (`outbox poll`, eventsourcing's follower) has no split.
"""

import contextlib
import statistics
import time
from collections.abc import Collection, Iterator
from dataclasses import dataclass, field
from typing import Any

import psycopg

from bench.common import Measurement, percentiles
from outbox.positions import Position
from poller.message import Message
from poller.store.leader_store import LeaderStore

RATE = 1000.0  # transactions per second, all writers together: the fixed rate
HIGH_RATE = 3000.0  # the second fixed rate
ROUNDS = 3
FULL_SECONDS = 10.0  # per consumer and round
QUICK_SECONDS = 1.0
PART_NAMES = ("(a) commit to frontier", "(b) frontier to read", "(c) read to handler")
QUANTILES = {"p50": 0, "p95": 1, "p99": 2}


@dataclass(frozen=True)
class Breakdown:
    """One message's commit-to-handler latency in its three parts, seconds."""

    to_frontier: float
    to_read: float
    to_handler: float

    @property
    def total(self) -> float:
        return self.to_frontier + self.to_read + self.to_handler


def frontier_passed(
    committed: dict[str, float], transaction_ids: dict[str, int]
) -> dict[str, float]:
    """When each message's row passed the safe frontier: the latest commit among the
    transactions at or below its transaction id (a prefix maximum in transaction-id order)."""
    passed: dict[str, float] = {}
    latest = float("-inf")
    written = [m for m in transaction_ids if m in committed]  # not the consumer's probe
    for message_id in sorted(written, key=transaction_ids.__getitem__):
        latest = max(latest, committed[message_id])
        passed[message_id] = latest
    return passed


def breakdowns(
    committed: dict[str, float],
    transaction_ids: dict[str, int],
    read_at: dict[str, float],
    handled_at: dict[str, float],
) -> list[Breakdown]:
    passed = frontier_passed(committed, transaction_ids)
    return [
        Breakdown(passed[m] - t, read_at[m] - passed[m], handled_at[m] - read_at[m])
        for m, t in committed.items()
        if m in handled_at and m in read_at and m in passed
    ]


# --- timing the daemon's reads ---------------------------------------------------------------


@contextlib.contextmanager
def reads_timed(read_at: dict[str, float]) -> Iterator[None]:
    """While open, every leader read records when it returned each message (first read only)."""
    original = LeaderStore.read_batch

    async def timed(self: LeaderStore, publication: str, after: Position, limit: int) -> Any:
        messages: list[Message] = await original(self, publication, after, limit)
        now = time.monotonic()
        for message in messages:
            read_at.setdefault(message.message_id, now)
        return messages

    LeaderStore.read_batch = timed  # type: ignore[method-assign]
    try:
        yield
    finally:
        LeaderStore.read_batch = original  # type: ignore[method-assign]


def transaction_ids(url: str, publication: str) -> dict[str, int]:
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT message_id, transaction_id::text::bigint FROM outbox.messages"
            " WHERE publication_id = %s",
            (publication,),
        ).fetchall()
    return dict(rows)


@dataclass(frozen=True)
class Round:
    """One consumer's run in one round of a setting."""

    latencies: list[float]  # seconds, commit to handler
    parts: list[Breakdown]  # empty for a consumer in another process
    written: int
    seconds: float
    unhandled: int
    from_due: list[float] = field(default_factory=list)  # seconds, due time to handler


def pooled(its_rounds: list[Round], quantile: str) -> float:
    """A quantile of every round's latencies together, ms."""
    return percentiles([x for r in its_rounds for x in r.latencies])[QUANTILES[quantile]]


def each_round(its_rounds: list[Round], quantile: str) -> str:
    return ", ".join(f"{percentiles(r.latencies)[QUANTILES[quantile]]:.1f}" for r in its_rounds)


def rows(
    rounds: dict[str, list[Round]],
    baseline: str,
    setting: str,
    quantiles: tuple[str, ...] = ("p50", "p99"),
    aims: dict[str, str] | None = None,
    aimed: Collection[str] | None = None,
) -> list[Measurement]:
    """Each quantile per consumer pooled over the rounds, then each part's p99 (p50 in the
    note), all against `baseline` (the bare loop) measured in the same rounds; `aims` adds a
    note to a quantile's rows of the `aimed` consumers (every one but the baseline)."""
    aimed = set(rounds) - {baseline} if aimed is None else set(aimed)
    return latency_rows(rounds, baseline, setting, quantiles, aims or {}, aimed) + part_rows(
        rounds, baseline, setting
    )


def latency_rows(
    rounds: dict[str, list[Round]],
    baseline: str,
    setting: str,
    quantiles: tuple[str, ...],
    aims: dict[str, str],
    aimed: set[str],
) -> list[Measurement]:
    measurements = []
    for quantile in quantiles:
        for variant, its_rounds in rounds.items():
            notes = [aims.get(quantile, "") if variant in aimed else ""]
            notes.append(f"rounds {each_round(its_rounds, quantile)} ms")
            if quantile == "p99" and any(r.parts for r in its_rounds):
                notes.append(slowest_share(its_rounds))
            elif quantile == "p50":
                written = sum(r.written for r in its_rounds)
                seconds = sum(r.seconds for r in its_rounds)
                notes.append(f"wrote {written / seconds:,.0f}/s")
                if unhandled := sum(r.unhandled for r in its_rounds):
                    notes.append(f"{unhandled:,} never handled")
            measurements.append(
                Measurement(
                    f"{quantile} at {setting}, {rounds_named(len(its_rounds))}",
                    variant,
                    pooled(its_rounds, quantile),
                    "ms",
                    None if variant == baseline else baseline,
                    "; ".join(note for note in notes if note),
                    higher_is_better=False,
                )
            )
    return measurements


def rounds_named(count: int) -> str:
    return "1 round" if count == 1 else f"{count} rounds"


def slowest_share(its_rounds: list[Round]) -> str:
    """Where the slowest 1% of messages waited: the mean of each part, ms."""
    parts = sorted((p for r in its_rounds for p in r.parts), key=lambda p: p.total)
    slowest = parts[-max(1, len(parts) // 100) :]
    a, b, c = (
        statistics.fmean(getattr(p, name) for p in slowest) * 1000
        for name in ("to_frontier", "to_read", "to_handler")
    )
    return f"slowest 1%: (a) {a:.1f} + (b) {b:.1f} + (c) {c:.1f} ms"


def part_rows(rounds: dict[str, list[Round]], baseline: str, setting: str) -> list[Measurement]:
    measurements = []
    for name, attribute in zip(PART_NAMES, ("to_frontier", "to_read", "to_handler"), strict=True):
        for variant, its_rounds in rounds.items():
            values = [getattr(p, attribute) for r in its_rounds for p in r.parts]
            if len(values) < 2:
                continue  # a consumer in another process: no split
            p50, _, p99 = percentiles(values)
            measurements.append(
                Measurement(
                    f"{name} at {setting}, p99",
                    variant,
                    p99,
                    "ms",
                    None if variant == baseline else baseline,
                    f"p50 {p50:.2f} ms",
                    higher_is_better=False,
                )
            )
    return measurements
