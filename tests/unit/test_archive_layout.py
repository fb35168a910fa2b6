"""The archive's layout, pure: paths a lake reader understands, catalog rows that read back as
written, a newer format refused, the job's duration option and its one line of a task's
failure."""

import datetime

import pytest

from outbox.archive.errors import ArchiveVersionError
from outbox.archive.layout import (
    FORMAT_VERSION,
    ArchivedFile,
    check_version,
    escape_path_value,
    file_path,
    range_checksum,
    range_of,
)
from outbox.positions import Position
from outbox_cli.errors import CommandUsageError
from outbox_cli.spark_command import seconds_of


def archived(slice_index: int, path: str, first: int, last: int, digest: str) -> ArchivedFile:
    return ArchivedFile(
        path=path,
        slice=slice_index,
        rows=last - first + 1,
        bytes=100,
        sha256=digest,
        first=Position(7, first),
        last=Position(7, last),
    )


@pytest.mark.parametrize(
    ("value", "escaped"),
    [
        ("orders", "orders"),
        ("a/b", "a%2Fb"),
        ("x=y:z", "x%3Dy%3Az"),
        ("50%", "50%25"),
        ("line\nbreak", "line%0Abreak"),
        ("café ünicode", "café ünicode"),  # as Spark escapes: only its characters
    ],
)
def test_a_publication_is_escaped_as_spark_escapes_partition_values(
    value: str, escaped: str
) -> None:
    assert escape_path_value(value) == escaped


def test_a_file_path_names_the_publication_day_token_slice_and_attempt() -> None:
    path = file_path("a/b", datetime.date(2026, 3, 4), "c0ffee00", 12, 1)
    assert path == "publication=a%2Fb/date=2026-03-04/part-c0ffee00-00012-1.parquet"


def test_a_file_reads_back_as_written() -> None:
    file = archived(3, "publication=o/date=2026-01-01/part-x-00003-0.parquet", 10, 19, "ab" * 32)
    assert ArchivedFile.from_json(file.to_json()) == file


def test_a_range_lists_its_files_by_slice_and_checksums_them_in_that_order() -> None:
    files = [
        archived(1, "b", 21, 40, "02" * 32),
        archived(0, "z", 1, 10, "01" * 32),
        archived(0, "a", 11, 20, "03" * 32),
    ]
    made = range_of(files, "orders", Position(0, 0), "file:///lake")
    assert [f.path for f in made.files] == ["a", "z", "b"]
    assert (made.first, made.last, made.rows) == (Position(7, 1), Position(7, 40), 40)
    assert made.checksum == range_checksum(made.files)
    assert made.checksum != range_checksum(files)  # the order is part of it
    assert [[f.path for f in slice_files] for slice_files in made.slices()] == [["a", "z"], ["b"]]


def test_a_newer_format_is_refused_naming_both_versions() -> None:
    check_version(FORMAT_VERSION, "here")
    with pytest.raises(
        ArchiveVersionError,
        match=f"here is in archive format version 9;.*up to version {FORMAT_VERSION}",
    ):
        check_version(9, "here")


@pytest.mark.parametrize(
    ("text", "seconds"), [("60s", 60.0), ("5m", 300.0), ("1h", 3600.0), ("90", 90.0), ("0.5", 0.5)]
)
def test_every_takes_seconds_or_a_unit(text: str, seconds: float) -> None:
    assert seconds_of(text, "--every") == seconds


@pytest.mark.parametrize("text", ["", "0", "-5m", "soon", "nan", "inf", "5d"])
def test_every_refuses_what_is_not_a_duration_naming_it(text: str) -> None:
    with pytest.raises(CommandUsageError, match=f"--every {text!r} is not a duration"):
        seconds_of(text, "--every")
