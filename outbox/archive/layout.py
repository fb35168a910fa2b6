"""Where an archive's files are and what its catalog rows say. Pure, no I/O.

An archive is a directory tree any lake reader understands (Hive-style partitions):

    URI/publication=P/date=YYYY-MM-DD/part-TOKEN-SLICE-ATTEMPT.parquet

`date` is the UTC day of each row's `appended_at`, exactly, so a filter on it is right. Which
files make up the archive is the database's to say, not the directory's: a range of
`outbox.archived_ranges` lists its files, and only listed files are read. A file a job wrote
and never listed (it was killed, or Spark ran a task twice) is not part of the archive.
"""

import dataclasses
import datetime
import hashlib
from collections.abc import Iterable, Mapping
from itertools import groupby
from typing import Any

from outbox.archive.errors import ArchiveVersionError
from outbox.positions import Position

FORMAT_VERSION = 1
"""The format this version of the package writes and the newest it reads. Version 1: the
columns below, zstd-compressed Parquet with page checksums, rows sorted in delivery order
within a file, the keys below in the file's key-value metadata."""


class ArchiveDefaults:
    """The archive job's defaults, written once (the job and `outbox spark archive`)."""

    rows_per_range = 1_000_000
    """The most messages one range (one Spark job, one catalog row) holds."""
    rows_per_file = 250_000
    """About how many messages a slice (a task, a file per UTC day) holds. A reader holds one
    slice in memory at a time: about 250 bytes a message in Arrow, so some 60 MB."""


VERSION_KEY = "outbox.archive.format_version"
PUBLICATION_KEY = "outbox.archive.publication"

COLUMNS = (
    "position",
    "transaction_id",
    "message_id",
    "message_type",
    "partition_key",
    "data",
    "headers",
    "appended_at",
)
"""A file's columns: the message as the outbox delivers it but its publication, which the
directory names. `transaction_id` is the ordering the outbox delivers in (with `position`)."""

# Spark's escaping of a partition value in a path (ExternalCatalogUtils.escapePathName), so a
# publication named `a/b` is one directory that Spark's partition discovery reads back as `a/b`.
_ESCAPED = {chr(code) for code in range(1, 0x20)} | set("\"#%'*/:=?\\\x7f{[]^")


def escape_path_value(value: str) -> str:
    return "".join(f"%{ord(char):02X}" if char in _ESCAPED else char for char in value)


def publication_directory(publication: str) -> str:
    return f"publication={escape_path_value(publication)}"


def file_path(
    publication: str, day: datetime.date, token: str, slice_index: int, attempt: int
) -> str:
    """A file's path relative to the archive's URI. `token` is the job's attempt at a range
    and `attempt` Spark's at the task, so no two writers ever share a name (a task run twice
    writes two files; the range lists the one whose task Spark kept)."""
    return (
        f"{publication_directory(publication)}/date={day.isoformat()}"
        f"/part-{token}-{slice_index:05d}-{attempt}.parquet"
    )


def check_version(version: int, where: str) -> None:
    """Refuse what a newer version of the package wrote, naming its version."""
    if version > FORMAT_VERSION:
        raise ArchiveVersionError(
            f"{where} is in archive format version {version}; this version of outbox-poller"
            f" reads and writes up to version {FORMAT_VERSION}: upgrade outbox-poller"
        )


@dataclasses.dataclass(frozen=True)
class ArchivedFile:
    path: str
    """Relative to the archive's URI."""
    slice: int
    """The slice of its range (slices are consecutive stretches of delivery order); a slice
    whose rows were appended on several UTC days has a file per day."""
    rows: int
    bytes: int
    sha256: str
    first: Position
    last: Position

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "slice": self.slice,
            "rows": self.rows,
            "bytes": self.bytes,
            "sha256": self.sha256,
            "first": str(self.first),
            "last": str(self.last),
        }

    @classmethod
    def from_json(cls, value: Mapping[str, Any]) -> "ArchivedFile":
        return cls(
            path=str(value["path"]),
            slice=int(value["slice"]),
            rows=int(value["rows"]),
            bytes=int(value["bytes"]),
            sha256=str(value["sha256"]),
            first=Position.parse(str(value["first"])),
            last=Position.parse(str(value["last"])),
        )


@dataclasses.dataclass(frozen=True)
class ArchivedRange:
    """The messages of (after, last] in delivery order, in `files`."""

    publication: str
    after: Position
    first: Position
    last: Position
    uri: str
    format_version: int
    rows: int
    bytes: int
    checksum: str
    files: tuple[ArchivedFile, ...]

    def slices(self) -> list[tuple[ArchivedFile, ...]]:
        """The files by slice, slices in delivery order."""
        ordered = sorted(self.files, key=lambda file: file.slice)
        return [tuple(files) for _, files in groupby(ordered, key=lambda file: file.slice)]


@dataclasses.dataclass(frozen=True)
class Archive:
    """A publication's archive as `outbox.archives` records it."""

    publication: str
    uri: str
    format_version: int
    begins_after: Position
    """The publication's retired-up-to mark when archiving began: what retention dropped
    before is in no archive."""
    mark: Position
    """The last message archived (the last range's last), `begins_after` while none is."""
    archived_at: datetime.datetime | None


def range_checksum(files: Iterable[ArchivedFile]) -> str:
    """A range's checksum: the SHA-256 of its files' digests, in the order listed."""
    digest = hashlib.sha256()
    for file in files:
        digest.update(bytes.fromhex(file.sha256))
    return digest.hexdigest()


def range_of(
    files: list[ArchivedFile], publication: str, after: Position, uri: str
) -> ArchivedRange:
    """The range a job's files make (listed by slice, then path)."""
    ordered = tuple(sorted(files, key=lambda file: (file.slice, file.path)))
    return ArchivedRange(
        publication=publication,
        after=after,
        first=min(file.first for file in ordered),
        last=max(file.last for file in ordered),
        uri=uri,
        format_version=FORMAT_VERSION,
        rows=sum(file.rows for file in ordered),
        bytes=sum(file.bytes for file in ordered),
        checksum=range_checksum(ordered),
        files=ordered,
    )
