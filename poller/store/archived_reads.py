"""Reading a publication's history where retention dropped it: from its archive, then the table.

Retention drops an archived publication's messages only up to the archive's mark A (the
holder `archive`), so its retired-up-to mark R never passes A, and A only grows. A reader
after a position below R (the table read refuses it: RetiredPositionError) reads the archive
from there up to A, as A stands once the refusal came (so A >= that R), and then the table
after A again: the archive holds every message up to A and the table every message after R,
so nothing is missed at the seam and nothing is read twice. If retention moved R past A
meanwhile (the job archived more, retention followed), the table refuses again and the
archive serves up to its newer mark. A refusal the archive cannot serve (no archive, or one
that begins after the position) stays the refusal it was.

The archive's location comes from the database (outbox.archives); its files are read with
pyarrow (the `archive` extra), which is imported only when a reader needs the archive.
"""

import asyncio
import datetime
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from itertools import repeat
from typing import TYPE_CHECKING, Any, NamedTuple

import psycopg

from outbox.archive.catalog import (
    archive_of,
    archive_of_async,
    ranges_after,
    ranges_after_async,
)
from outbox.archive.errors import ArchiveError
from outbox.archive.layout import Archive, ArchivedFile, ArchivedRange, check_version
from outbox.positions import START, Position
from poller.message import Message
from poller.store.retired_positions import (
    RetiredPositionError,
    retired_up_to,
    retired_up_to_async,
)

if TYPE_CHECKING:
    import pyarrow as pa

# Ranges asked for at a time: a read rarely needs more than the next one.
RANGES_AHEAD = 4

Row = tuple[Any, ...]
"""A message in the read query's columns (poller.message.Message.from_row)."""

Keep = Callable[[str | None, int], bool]
"""Which messages a reader wants, by partition key and position (a shard's)."""


@dataclass(frozen=True)
class ArchivedPage:
    messages: list[Message]
    covered_to: Position
    """Every archived message the reader wants up to here has been read: the next read may
    start here, though the last message returned may lie before it (a shard's reader)."""


class ArchivedReads:
    """One reader's way through a publication's archive: the slice it reads is kept, with its
    place in it, so consecutive pages decode each file once."""

    def __init__(
        self,
        publication: str,
        keep: Keep | None = None,
        until: Callable[[], Awaitable[Position | None]] | None = None,
    ) -> None:
        """`keep`: the messages wanted (all when None); `until`: asked at each read, none
        after what it gives is read (a daemon's term: its count's bound as the database says
        now, a draining count's barrier even when the term has not seen the change yet)."""
        self._publication = publication
        self._keep = keep
        self._until = until
        self._ranges: list[ArchivedRange] = []
        self._loaded: _LoadedSlice | None = None
        # Its mark only grows: asked again only to read past the one known (a page a query).
        self._archive: Archive | None = None

    async def read(
        self, conn: psycopg.AsyncConnection[Any], after: Position, limit: int
    ) -> ArchivedPage | None:
        """Up to `limit` archived messages after `after`; None when the publication has no
        archive or it holds nothing after `after` (the archive's mark is not past it).
        RetiredPositionError when the archive begins after `after`."""
        archive = self._archive
        if archive is None or archive.mark <= after:
            archive = self._archive = await archive_of_async(conn, self._publication)
        if archive is None or archive.mark <= after:
            return None
        check_version(archive.format_version, f"the archive of {self._publication!r}")
        if after < archive.begins_after:
            raise RetiredPositionError(self._publication, after, archive.begins_after)
        bound = None if self._until is None else await self._until()
        end = archive.mark if bound is None else min(archive.mark, bound)
        messages: list[Message] = []
        at = after
        while len(messages) < limit and at < end:
            archived = await self._range_after(conn, at)
            if archived is None:
                break  # the mark moved back: the archive was deleted and begun again
            at = min(await self._read_range(archived, at, end, limit, messages), end)
        return ArchivedPage(messages, at)

    async def _range_after(
        self, conn: psycopg.AsyncConnection[Any], after: Position
    ) -> ArchivedRange | None:
        self._ranges = [archived for archived in self._ranges if archived.last > after]
        if not self._ranges:
            self._ranges = await ranges_after_async(conn, self._publication, after, RANGES_AHEAD)
        return self._ranges[0] if self._ranges else None

    async def _read_range(
        self,
        archived: ArchivedRange,
        after: Position,
        end: Position,
        limit: int,
        messages: list[Message],
    ) -> Position:
        """Append the range's messages after `after` up to `end` to `messages`, up to `limit`
        in all; where the read got to (the range's last message once it is read through)."""
        for index, files in enumerate(archived.slices()):
            if max(file.last for file in files) <= after:
                continue
            loaded = self._loaded
            if loaded is None or loaded.key != (archived.last, index):
                loaded = await asyncio.to_thread(_LoadedSlice.load, archived, index, files)
                self._loaded = loaded
            wanted = _Wanted(self._publication, self._keep, end)
            after = loaded.take(after, limit - len(messages), wanted, messages)
            if len(messages) >= limit or after >= end:
                return after
        return archived.last


class _Wanted(NamedTuple):
    publication: str
    keep: Keep | None
    end: Position
    """No message after it is taken."""


class _LoadedSlice:
    """One slice's rows in delivery order, and where the last page of it ended."""

    def __init__(self, key: tuple[Position, int], table: "pa.Table") -> None:
        self.key = key
        self._table = table
        self._next = 0
        self._next_after: Position | None = None

    @classmethod
    def load(
        cls, archived: ArchivedRange, index: int, files: tuple[ArchivedFile, ...]
    ) -> "_LoadedSlice":
        files_module = _files()
        table = files_module.read_slice(archived.uri, files, archived.after, archived.last)
        return cls((archived.last, index), table)

    def take(
        self, after: Position, limit: int, wanted: "_Wanted", messages: list[Message]
    ) -> Position:
        """Append up to `limit` wanted messages after `after`; where the scan got to."""
        publication, keep, end = wanted
        start = self._next if self._next_after == after else self._first_after(after)
        scanned = after
        while start < self._table.num_rows and limit > 0:
            # A shard's reader keeps some rows of a page: it reads more than it wants.
            asked = limit if keep is None else max(limit, 500)
            rows = self._rows(start, asked, publication, end)
            if not rows:
                break  # the next row lies past `end`
            taken, used = rows, len(rows)
            if keep is not None:
                taken, used = [], 0
                for row in rows:
                    used += 1
                    if keep(row[5], row[0]):
                        taken.append(row)
                        if len(taken) == limit:
                            break
            messages.extend(map(Message.from_row, taken))
            limit -= len(taken)
            start += used
            scanned = Position(rows[used - 1][1], rows[used - 1][0])
            if len(rows) < asked and start < self._table.num_rows:
                break  # cut at `end`
        self._next, self._next_after = start, scanned
        return scanned

    def _rows(self, start: int, count: int, publication: str, end: Position) -> list[Row]:
        """Rows `start` to `start + count` in the read query's columns, none past `end`."""
        page = self._table.slice(start, count)
        positions = page.column("position").to_pylist()
        transactions = page.column("transaction_id").to_pylist()
        if (transactions[-1], positions[-1]) > end:
            count = sum(1 for row in zip(transactions, positions, strict=True) if row <= end)
            page = page.slice(0, count)
            positions, transactions = positions[:count], transactions[:count]
        return list(
            zip(
                positions,
                transactions,
                repeat(publication, len(positions)),
                page.column("message_id").to_pylist(),
                page.column("message_type").to_pylist(),
                page.column("partition_key").to_pylist(),
                page.column("data").to_pylist(),
                page.column("headers").to_pylist(),
                _datetimes(page.column("appended_at")),
                strict=True,
            )
        )

    def _first_after(self, after: Position) -> int:
        """The index of the first row after `after` (rows are in delivery order)."""
        transaction = self._table.column("transaction_id")
        position = self._table.column("position")
        low, high = 0, self._table.num_rows
        while low < high:
            middle = (low + high) // 2
            if (transaction[middle].as_py(), position[middle].as_py()) <= after:
                low = middle + 1
            else:
                high = middle
        return low


_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


def _datetimes(column: Any) -> list[datetime.datetime]:
    """`appended_at` as aware datetimes in UTC, as the table's read gives them. pyarrow's own
    conversion of a zoned timestamp cost 3.2 us a value, more than building the Message; from
    the microseconds it is 0.6 us, and a transaction's messages, which share the time (its
    start) and come together in delivery order, reuse one datetime."""
    times = []
    previous_micros: int | None = None
    previous = _EPOCH
    import pyarrow as pa

    for micros in column.cast(pa.int64()).to_pylist():
        if micros != previous_micros:
            previous = _EPOCH + datetime.timedelta(microseconds=micros)
            previous_micros = micros
        times.append(previous)
    return times


def _files() -> Any:
    """outbox.archive.files, which needs pyarrow: the `archive` extra."""
    try:
        import outbox.archive.files as files
    except ModuleNotFoundError as error:
        raise ArchiveError(
            "reading a publication's archive needs pyarrow: pip install 'outbox-poller[archive]'"
            f" ({error})"
        ) from None
    return files


async def read_through_archive(
    read_table: Callable[[Position, int], Awaitable[list[Message]]],
    archived: ArchivedReads,
    conn: psycopg.AsyncConnection[Any],
    after: Position,
    limit: int,
) -> tuple[list[Message], Position]:
    """Up to `limit` messages after `after`: the table's, and where retention dropped them,
    the archive's first (see the module's docstring). Also where the read got to: past the
    last message returned when the archive was read through and the table had nothing more."""
    messages: list[Message] = []
    while True:
        try:
            rows = await read_table(after, limit - len(messages))
        except RetiredPositionError as refused:
            page = await archived.read(conn, after, limit - len(messages))
            if page is None or page.covered_to <= after:
                raise refused from None
            messages += page.messages
            after = page.covered_to
            if len(messages) >= limit:
                return messages, after
            continue
        messages += rows
        return messages, messages[-1].at if rows else after


def history_floor(conn: psycopg.Connection[Any], publication: str) -> Position | None:
    """Where a reader's history of `publication` begins now: the archive's beginning when it
    is archived (its archive holds what retention dropped since), else the retired-up-to
    mark; None when nothing before either is gone. A reader after a place below it has lost
    messages; at or after it, it reads every one (from the archive, then the table)."""
    archive = archive_of(conn, publication)
    mark = retired_up_to(conn, publication) if archive is None else None
    return _floor(archive, mark)


async def history_floor_async(
    conn: psycopg.AsyncConnection[Any], publication: str
) -> Position | None:
    archive = await archive_of_async(conn, publication)
    mark = await retired_up_to_async(conn, publication) if archive is None else None
    return _floor(archive, mark)


def _floor(archive: Archive | None, mark: Position | None) -> Position | None:
    floor = mark if archive is None else archive.begins_after
    return None if floor is None or floor == START else floor


def find_archived(
    conn: psycopg.Connection[Any],
    publication: str,
    *,
    message_id: str | None = None,
    position: int | None = None,
    at: Position | None = None,
) -> Message | None:
    """One archived message by its id, its position or its place in delivery order (exactly
    one of them); None when the publication has no archive or it holds no such message."""
    archive = archive_of(conn, publication)
    if archive is None:
        return None
    check_version(archive.format_version, f"the archive of {publication!r}")
    files = _files()
    ranges = ranges_after(conn, publication, archive.begins_after, 2**31 - 1)
    column: str
    value: object
    if at is not None:
        candidates = [
            (archived.uri, file)
            for archived in ranges
            if archived.after < at <= archived.last
            for file in archived.files
            if file.first <= at <= file.last
        ]
        column, value = "position", at.position
    else:
        candidates = [(archived.uri, file) for archived in ranges for file in archived.files]
        if message_id is not None:
            column, value = "message_id", message_id
        else:
            column, value = "position", position
    for uri, file in candidates:
        rows = files.find(uri, [file], column, value)
        if at is not None:
            rows = files.between(rows, Position(at.transaction_id, at.position - 1), at)
        if rows.num_rows:
            row = rows.slice(0, 1).to_pylist()[0]
            return Message.from_row(
                (
                    row["position"],
                    row["transaction_id"],
                    publication,
                    row["message_id"],
                    row["message_type"],
                    row["partition_key"],
                    row["data"],
                    row["headers"],
                    row["appended_at"],
                )
            )
    return None
