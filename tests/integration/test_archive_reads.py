"""Catch-up subscriptions read a publication's archive where retention dropped its messages,
then the table: one history, the same Message objects, in the same order."""

import hashlib
from pathlib import Path
from typing import Any

import psycopg
import pyarrow.parquet as pq
import pytest
from psycopg.types.json import Jsonb

import poller
from outbox.archive.errors import ArchiveFileError, ArchiveVersionError
from outbox.archive.layout import VERSION_KEY
from outbox.positions import Position
from poller.daemon.options import DaemonOptions
from poller.retention import retention_pass
from poller.store import archived_reads
from poller.store.message_reads import read_batch
from tests.support.archives import archive_ranges
from tests.support.partitions import billing_over_three_partitions, move_checkpoint

SIZE = 100
NO_AGE = DaemonOptions(retention_minimum_age=0.001, partition_size=SIZE, partitions_ahead=2)
FIELDS = (
    "position",
    "transaction_id",
    "publication",
    "message_id",
    "message_type",
    "partition_key",
    "data_text",
    "headers_text",
    "appended_at",
    "delivery_attempt",
)


def described(message: poller.Message) -> tuple[Any, ...]:
    return tuple(getattr(message, field) for field in FIELDS)


@pytest.fixture
def conn(database_url: str) -> Any:
    # Positions 1 to 250 in partitions 0, 100 and 200.
    with billing_over_three_partitions(database_url, SIZE) as connection:
        yield connection


def everything(conn: psycopg.Connection[Any]) -> list[poller.Message]:
    return read_batch(conn, "orders", Position(0, 0), 10_000)


def caught_up(url: str, start: Any = "start") -> list[poller.Message]:
    items = poller.subscribe_sync(url, "orders", start=start)
    read = []
    for item in items:
        if isinstance(item, poller.CaughtUp):
            break
        if isinstance(item, poller.Message):
            read.append(item)
    items.close()
    return read


def test_start_reads_the_archive_then_the_table_as_one_history(
    conn: psycopg.Connection[Any], database_url: str, tmp_path: Path
) -> None:
    history = everything(conn)
    archive_ranges(database_url, "orders", tmp_path.as_uri(), rows_per_range=60, rows_per_file=25)
    move_checkpoint(conn, "billing", 150)
    retired = retention_pass(conn, NO_AGE).retired
    assert [r.outcome for r in retired] == ["retired"]

    read = caught_up(database_url)

    assert [described(m) for m in read] == [described(m) for m in history]


@pytest.fixture
def seam(conn: psycopg.Connection[Any], database_url: str, tmp_path: Path) -> Any:
    """'orders' archived up to position 200 in ranges of 50 (files of 20), positions 1 to 199
    retired: a reader from the start reads (0, 200] from the archive, then the table."""
    history = everything(conn)
    archive_ranges(
        database_url, "orders", tmp_path.as_uri(), rows_per_range=50, rows_per_file=20, ranges=4
    )
    move_checkpoint(conn, "billing", 250)
    assert [r.outcome for r in retention_pass(conn, NO_AGE).retired] == ["retired", "retired"]
    return history


@pytest.mark.parametrize("index", [None, 10, 120, 199, 220, 249])
def test_resuming_on_either_side_of_the_seam_reads_exactly_what_follows(
    seam: list[poller.Message], database_url: str, index: int | None
) -> None:
    start = "start" if index is None else poller.Checkpoint(*seam[index].at)
    expected = seam if index is None else seam[index + 1 :]
    assert [described(m) for m in caught_up(database_url, start)] == [
        described(m) for m in expected
    ]


def test_without_an_archive_a_start_below_the_retired_mark_is_still_refused(
    conn: psycopg.Connection[Any], database_url: str
) -> None:
    resume = poller.Checkpoint(*everything(conn)[5].at)
    move_checkpoint(conn, "billing", 150)
    assert [r.outcome for r in retention_pass(conn, NO_AGE).retired] == ["retired"]
    with pytest.raises(poller.RetiredPositionError, match=f"after {resume}"):
        caught_up(database_url, resume)


def first_file(conn: psycopg.Connection[Any], tmp_path: Path) -> Path:
    row = conn.execute(
        "SELECT files -> 0 ->> 'path' FROM outbox.archived_ranges"
        " ORDER BY last_transaction_id, last_position LIMIT 1"
    ).fetchone()
    assert row is not None
    return tmp_path / str(row[0])


def damaged(file: Path, how: str) -> None:
    data = bytearray(file.read_bytes())
    if how == "missing":
        file.unlink()
    elif how == "cut short":
        file.write_bytes(data[: len(data) // 2])
    else:  # a byte changed, the size kept
        data[len(data) // 2] ^= 0xFF
        file.write_bytes(bytes(data))


@pytest.mark.parametrize(
    ("how", "said"),
    [
        ("missing", "is missing"),
        ("cut short", r"is \d+ bytes, the archive recorded \d+"),
        ("changed", "does not match the SHA-256 the archive recorded"),
    ],
)
@pytest.mark.usefixtures("seam")
def test_a_damaged_file_is_named_and_nothing_is_read_past_it(
    conn: psycopg.Connection[Any],
    database_url: str,
    tmp_path: Path,
    how: str,
    said: str,
) -> None:
    file = first_file(conn, tmp_path)
    damaged(file, how)
    items = poller.subscribe_sync(database_url, "orders", start="start")
    name = f"{tmp_path.as_uri()}/{file.relative_to(tmp_path)}"
    with pytest.raises(ArchiveFileError, match=f"archive file {name} {said}"):
        next(items)
    items.close()


@pytest.mark.usefixtures("seam")
def test_an_archive_of_a_newer_format_is_refused_naming_its_version(
    conn: psycopg.Connection[Any], database_url: str, tmp_path: Path
) -> None:
    # A file written by a newer version, recorded as such (sizes and digest match).
    file = first_file(conn, tmp_path)
    table = pq.read_table(file)
    newer = table.replace_schema_metadata({VERSION_KEY: "2"})
    pq.write_table(newer, file)
    data = file.read_bytes()
    conn.execute(
        "UPDATE outbox.archived_ranges SET files = jsonb_set(jsonb_set(files, '{0,bytes}', %s),"
        " '{0,sha256}', %s) WHERE files -> 0 ->> 'path' = %s",
        (
            Jsonb(len(data)),
            Jsonb(hashlib.sha256(data).hexdigest()),
            str(file.relative_to(tmp_path)),
        ),
    )
    with pytest.raises(ArchiveVersionError, match="archive format version 2; this version"):
        caught_up(database_url)
    conn.execute("UPDATE outbox.archives SET format_version = 3")
    with pytest.raises(ArchiveVersionError, match=r"'orders' is in archive format version 3"):
        caught_up(database_url)


def test_retention_passing_the_archive_s_mark_during_a_read_sends_the_reader_back_to_it(
    conn: psycopg.Connection[Any],
    database_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Archived to 100 and retired to 99, a reader reads the archive up to 100; before its
    table read after 100, the job archives the rest and retention drops up to 199. The table
    read is refused, and the reader takes the archive's newer mark rather than fail."""
    history = everything(conn)
    archive_ranges(database_url, "orders", tmp_path.as_uri(), rows_per_range=50, ranges=2)
    move_checkpoint(conn, "billing", 250)
    assert [r.outcome for r in retention_pass(conn, NO_AGE).retired] == ["retired"]
    archive_read = archived_reads.ArchivedReads.read
    moved: list[str] = []

    async def then_retention_moves_on(
        self: archived_reads.ArchivedReads, *args: Any
    ) -> archived_reads.ArchivedPage | None:
        page = await archive_read(self, *args)
        if not moved:
            archive_ranges(database_url, "orders", tmp_path.as_uri(), rows_per_range=1000)
            with psycopg.connect(database_url, autocommit=True) as other:
                moved.extend(r.outcome for r in retention_pass(other, NO_AGE).retired)
        return page

    monkeypatch.setattr(archived_reads.ArchivedReads, "read", then_retention_moves_on)
    assert [described(m) for m in caught_up(database_url)] == [described(m) for m in history]
    assert "retired" in moved  # 100 to 199 (and on) went between the reader's two reads
