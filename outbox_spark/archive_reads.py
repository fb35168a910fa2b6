"""Spark's source with the `archive` option: a publication's archived history, then the table.

Planning reads the archive's mark A: the query reads `(start, A]` from the archive's files
(one task per slice of a range, as the job wrote them) and what follows A from the table.
Retention drops an archived publication's messages only up to A (it waits for the archive),
so the table holds every message after A when planned. A streaming query's subscription row
keeps it so until the query has read them; a batch read keeps no row, so a table slice that
finds, once its COPY is done, that retention has dropped messages of it since (the retired
mark R past the slice's start) takes the messages of `(start, R]` it did not get from the
archive, which holds them (A >= R): no gap, and no message twice (a message is its position).
"""

from collections.abc import Iterator
from typing import Any

import psycopg
import pyarrow as pa
import pyarrow.compute as pc

from outbox.archive import catalog
from outbox.archive.files import read_slice
from outbox.archive.layout import Archive, check_version
from outbox.positions import Position
from outbox_spark.options import OptionError
from outbox_spark.partitions import ArchiveSlice
from outbox_spark.wire_batches import declared_batch

# More ranges than any archive holds: a plan lists every one it reads.
ALL = 2**31 - 1


def archive_for(conn: psycopg.Connection[Any], publication: str) -> Archive:
    """The publication's archive, whose format this version reads; refused if it has none."""
    archive = catalog.archive_of(conn, publication)
    if archive is None:
        raise OptionError(
            f"option archive: publication {publication!r} has no archive (`outbox spark archive"
            f" --publication {publication} --to URI` makes one)"
        )
    check_version(archive.format_version, f"the archive of {publication!r}")
    return archive


def archive_slices(
    conn: psycopg.Connection[Any], publication: str, uri: str, after: Position, until: Position
) -> list[ArchiveSlice]:
    """The tasks that read `(after, until]` from the archive: a slice of a range each."""
    parts = []
    for archived in catalog.ranges_after(conn, publication, after, ALL):
        if not archived.after < until:
            break
        for files in archived.slices():
            if max(file.last for file in files) <= after:
                continue
            if min(file.first for file in files) > until:
                break
            low, high = max(after, archived.after), min(until, archived.last)
            parts.append(ArchiveSlice(low, high, files, uri))
    return parts


def read_archive_slice(part: ArchiveSlice, publication: str) -> Iterator[pa.RecordBatch]:
    """A slice's rows in the declared schema (its files are checked first)."""
    for batch in read_slice(part.uri, part.files, part.after, part.until).to_batches():
        yield declared_batch(batch, publication)


def missing_from_archive(
    conninfo: str,
    application_name: str,
    publication: str,
    uri: str,
    after: Position,
    until: Position,
    read: list[pa.Array],
) -> Iterator[pa.RecordBatch]:
    """The archived messages of `(after, until]` whose positions are not among `read` (those
    a table slice got before retention dropped the rest)."""
    with psycopg.connect(conninfo, autocommit=True, application_name=application_name) as conn:
        parts = archive_slices(conn, publication, uri, after, until)
    seen = pa.concat_arrays(read) if read else pa.array([], pa.int64())
    for part in parts:
        table = read_slice(part.uri, part.files, part.after, part.until)
        unseen = table.filter(pc.invert(pc.is_in(table.column("position"), value_set=seen)))
        for batch in unseen.to_batches():
            yield declared_batch(batch, publication)


def archive_batch_end(
    conn: psycopg.Connection[Any], publication: str, after: Position, limit: int | None
) -> Position | None:
    """A streaming batch's end in the archive: the end of the ranges after `after` that make
    up `limit` messages (at least one range: a batch ends at a range's end, so a range larger
    than the limit is one batch), every range with no limit; None if none is after `after`."""
    end = None
    rows = 0
    for archived in catalog.ranges_after(conn, publication, after, ALL):
        end = archived.last
        rows += archived.rows
        if limit is not None and rows >= limit:
            break
    return end
