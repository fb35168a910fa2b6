"""A catch-up reader racing the archive job and retention across the seam: while writers
append, ranges are archived and partitions retired behind the reader, and it reads every
committed message once, from the archive where they were dropped and the table after."""

import asyncio
from collections import Counter
from collections.abc import Generator
from pathlib import Path

import psycopg
import pytest

import outbox
import poller
from poller.catch_up import stream
from poller.daemon.options import DaemonOptions
from poller.retention import retention_pass
from poller.store import archived_reads
from tests.support.archives import archive_ranges
from tests.support.background import BackgroundLoop
from tests.support.partitions import use_small_partitions

SIZE = 50
# Every pass closes the filling partition by age (the minimum age is a millisecond), so
# positions jump a partition at a time: many are made ahead.
AHEAD = 100
RETENTION = DaemonOptions(retention_minimum_age=0.001, partition_size=SIZE, partitions_ahead=AHEAD)
WRITES = 60  # transactions of 10 messages
READS = 3  # readers from the start, one after another, while all of it runs


def test_readers_racing_the_archive_and_retention_lose_and_double_nothing(
    database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    use_small_partitions(database_url, SIZE, ahead=AHEAD)
    monkeypatch.setattr(stream, "BATCH_SIZE", 7)  # many reads, each a chance to meet a drop
    seam_crossings = Counter[str]()
    archive_read = archived_reads.ArchivedReads.read

    async def counted(self: archived_reads.ArchivedReads, *args: object) -> object:
        page = await archive_read(self, *args)  # type: ignore[arg-type]
        seam_crossings["archive reads"] += 1
        return page

    monkeypatch.setattr(archived_reads.ArchivedReads, "read", counted)
    committed: list[str] = []

    def write() -> Generator[None, None, None]:
        with psycopg.connect(database_url) as conn:
            for batch in range(WRITES):
                ids = [f"m-{batch}-{n}" for n in range(10)]
                outbox.append_many(
                    conn,
                    "orders",
                    [
                        outbox.NewMessage("T", {"n": n}, message_id=i, partition_key=f"k{n % 3}")
                        for n, i in enumerate(ids)
                    ],
                )
                conn.commit()
                committed.extend(ids)
                yield None

    def archive_and_retire() -> Generator[None, None, None]:
        with psycopg.connect(database_url, autocommit=True) as conn:
            while True:
                archive_ranges(database_url, "orders", tmp_path.as_uri(), rows_per_range=23)
                retired = retention_pass(conn, RETENTION).retired
                seam_crossings["partitions retired"] += sum(r.outcome == "retired" for r in retired)
                yield None

    async def read_everything() -> Counter[str]:
        """One reader from the start, until it has read as many messages as are written in
        all: the count, not the writer's thread, says when (a reader that has read the last
        message may be told nothing more, so it must not wait for the writer to end)."""
        read = Counter[str]()
        items = poller.subscribe(database_url, "orders", start="start")
        try:
            async with asyncio.timeout(60):  # a message lost would leave it waiting: fail instead
                async for item in items:
                    if isinstance(item, poller.Message):
                        read[item.message_id] += 1
                    if sum(read.values()) >= WRITES * 10 or writer.error:
                        break
        except TimeoutError:
            pass  # what it missed is named below
        finally:
            await items.aclose()
        return read

    with (
        BackgroundLoop[None]("writer", write(), every=0.01) as writer,
        BackgroundLoop[None]("archive and retention", archive_and_retire(), every=0.02) as keeper,
    ):
        read_counts = [asyncio.run(read_everything()) for _ in range(READS)]
        writer.stop()
        keeper.stop()

    every = Counter(committed)
    assert len(every) == WRITES * 10
    for read in read_counts:
        lost = every - read
        doubled = read - every
        assert (sum(lost.values()), sum(doubled.values())) == (0, 0), (lost, doubled)
    # The race did happen: partitions went behind the readers, who read them archived.
    assert seam_crossings["partitions retired"] >= 5, seam_crossings
    assert seam_crossings["archive reads"] >= READS, seam_crossings
