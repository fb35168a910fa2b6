"""`outbox spark archive`: a publication's messages below the safe frontier, archived to
Parquet once each, range after range, on Spark.

One round archives the next range: `(mark, end]` in delivery order, where `mark` is the last
message archived (outbox.archives) and `end` the last of at most `rows_per_range` messages
below the safe frontier, so nothing can still commit inside the range. It is cut into slices
of about `rows_per_file` messages (keyset ranges of equal counts, as the Spark source cuts a
batch); each slice is a Spark task that reads its rows with COPY and writes them as Parquet
(outbox_spark/archive_tasks.py). Once every task has returned, the driver records the range
with its files and moves the mark, in one statement (outbox/archive/catalog.py): the range is
part of the archive from that commit on, and not before.

Exactly once, whatever happens to the job:
- Killed while tasks write: no row lists their files, so no reader sees them; the next run
  removes them (`_sweep`) and archives the same range again from the same mark.
- Killed after the commit: the mark has moved; the next run starts after it.
- Two jobs: the archive lock is a session lock on the job's own connection (no transaction,
  so no xid holding back every reader's safe frontier while Spark writes); the second job is
  refused, or waits with `wait`. And the commit only moves a mark that is where the range
  starts, so even a job that lost its lock unnoticed could not record a range twice.
"""

import dataclasses
import logging
import math
import re
import secrets
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
from pyspark.sql import SparkSession

from outbox.archive import catalog
from outbox.archive.errors import ArchiveError, ArchiveRefusedError
from outbox.archive.files import part_files, remove
from outbox.archive.layout import (
    Archive,
    ArchiveDefaults,
    ArchivedFile,
    ArchivedRange,
    check_version,
    range_of,
)
from outbox.positions import START, Position
from outbox_spark import batches
from outbox_spark.archive_tasks import SliceWriter
from outbox_spark.options import CopyDriver, DatabaseLocation, PartitionBy
from outbox_spark.queries import spark_queries

log = logging.getLogger(__name__)

APPLICATION_NAME = "outbox-spark-archive"

# Seconds between two tries for a lock another job holds (`--wait`).
LOCK_RETRY = 1.0


@dataclasses.dataclass(frozen=True)
class ArchiveSettings:
    publication: str
    uri: str
    """Where the archive is, as every reader will find it (see `absolute_uri`)."""
    database: DatabaseLocation
    rows_per_range: int = ArchiveDefaults.rows_per_range
    rows_per_file: int = ArchiveDefaults.rows_per_file
    copy_driver: CopyDriver = CopyDriver.AUTO


def absolute_uri(uri: str) -> str:
    """The archive's URI as stored: a local path becomes an absolute file:// URI, so the
    daemon, a catch-up subscription or a command run from another directory find it."""
    if "://" in uri:
        return uri.rstrip("/") if not uri.endswith(":///") else uri
    return Path(uri).expanduser().resolve().as_uri()


class ArchiveJob:
    def __init__(
        self,
        settings: ArchiveSettings,
        stop: threading.Event,
        session: Callable[[], SparkSession],
    ) -> None:
        """`session` starts (or joins) Spark: called once the lock is taken and the archive
        checked, so a refused job costs no JVM."""
        self._settings = settings
        self._stop = stop
        self._session = session
        self._spark: SparkSession | None = None

    def run(self, *, every: float | None = None, wait: bool = False) -> int:
        """Archive every message below the safe frontier; with `every`, again that many
        seconds after catching up, until stopped. Returns the ranges archived."""
        archived = 0
        with psycopg.connect(
            self._settings.database.conninfo(), autocommit=True, application_name=APPLICATION_NAME
        ) as conn:
            if not self._lock(conn, wait):
                return 0  # stopped while waiting for the lock
            try:
                archive = self._begin(conn)
                self._spark = self._session()
                self._sweep(conn, archive)
                while not self._stop.is_set():
                    while not self._stop.is_set() and self.archive_range(conn) is not None:
                        archived += 1
                    if every is None or self._stop.wait(every):
                        break
            finally:
                if not conn.closed:
                    catalog.release_lock(conn, self._settings.publication)
        return archived

    def _lock(self, conn: psycopg.Connection[Any], wait: bool) -> bool:
        publication = self._settings.publication
        said = False
        while not catalog.try_lock(conn, publication):
            holder = catalog.lock_holder(conn, publication) or "its session is hidden from you"
            if not wait:
                raise ArchiveRefusedError(
                    f"another archive job writes the archive of {publication!r} now ({holder});"
                    " run again once it ends, or with --wait to wait for it"
                )
            if not said:
                log.warning(
                    "another archive job writes the archive of %r now (%s); waiting for it",
                    publication,
                    holder,
                )
                said = True
            if self._stop.wait(LOCK_RETRY):
                return False
        return True

    def _begin(self, conn: psycopg.Connection[Any]) -> Archive:
        settings = self._settings
        archive = catalog.begin_archive(conn, settings.publication, settings.uri)
        if archive.uri != settings.uri:
            raise ArchiveRefusedError(
                f"the archive of {settings.publication!r} is at {archive.uri}, not"
                f" {settings.uri}: archive there (--to {archive.uri}), or delete it first"
                f" (`outbox archive delete --publication {settings.publication}`) to start anew"
            )
        check_version(archive.format_version, f"the archive of {settings.publication!r}")
        return archive

    def _sweep(self, conn: psycopg.Connection[Any], archive: Archive) -> None:
        """Remove the files no range lists: a job that stopped while writing left them, and
        no reader sees them. Under the lock, so no other job's files are among them."""
        listed = {
            file.path
            for archived in catalog.ranges_after(conn, archive.publication, START, 2**31 - 1)
            for file in archived.files
        }
        stray = [
            path for path in part_files(archive.uri, archive.publication) if path not in listed
        ]
        if stray:
            remove(archive.uri, stray)
            log.warning(
                "removed %d file(s) of %s that no range lists (a job stopped while writing)",
                len(stray),
                archive.uri,
            )

    def archive_range(self, conn: psycopg.Connection[Any]) -> ArchivedRange | None:
        """Archive the next range; None when no message below the safe frontier is left."""
        settings = self._settings
        archive = catalog.archive_of(conn, settings.publication)
        if archive is None or archive.uri != settings.uri:
            raise ArchiveRefusedError(
                f"the archive of {settings.publication!r} was deleted or moved while this job ran"
            )
        after = archive.mark
        # Read on the database itself, which needs no proof (outbox/read_servers.py).
        end = batches.batch_end(
            conn, settings.publication, after, settings.rows_per_range, proof=None
        )
        if end is None:
            return None
        rows = _rows_between(conn, settings.publication, after, end)
        count = max(1, math.ceil(rows / settings.rows_per_file))
        slices = batches.slices(conn, settings.publication, after, end, count, PartitionBy.RANGE)
        token = secrets.token_hex(4)
        files = self._write(slices, token, after, end)
        archived = range_of(files, settings.publication, after, settings.uri)
        _check(archived, len(slices), rows, end)
        # From here the files are the range's: a failure of the commit itself may have
        # committed (the answer lost), so they are left to the next run's sweep, which reads
        # the catalog first.
        if not catalog.commit_range(conn, archived):
            raise ArchiveRefusedError(
                f"the archive of {settings.publication!r} changed while this job wrote range"
                f" ({after}, {end}]: it was deleted, or another job ran; nothing was recorded"
            )
        log.info(
            "archived %s (%s, %s]: %d messages in %d files, %d bytes",
            settings.publication,
            after,
            end,
            archived.rows,
            len(archived.files),
            archived.bytes,
        )
        return archived

    def _write(
        self, slices: list[Any], token: str, after: Position, end: Position
    ) -> list[ArchivedFile]:
        settings = self._settings
        writer = SliceWriter(
            settings.publication, settings.uri, settings.database, settings.copy_driver, token
        )
        assert self._spark is not None  # started before the first range
        context = self._spark.sparkContext
        context.setJobDescription(f"archive {settings.publication} ({after}, {end}]")
        try:
            written = (
                context.parallelize(list(enumerate(slices)), len(slices)).flatMap(writer).collect()
            )
        except BaseException as error:
            self._remove_attempt(token)
            if isinstance(error, Exception) and not isinstance(error, ArchiveError):
                raise ArchiveError(
                    f"archiving {settings.publication!r} ({after}, {end}] failed in a Spark"
                    f" task, nothing was recorded: {task_failure(error)}"
                ) from error
            raise
        return [ArchivedFile.from_json(value) for value in written]

    def _remove_attempt(self, token: str) -> None:
        """The files this attempt wrote, which nothing lists (best effort: the next run's
        sweep finds any left)."""
        settings = self._settings
        try:
            mine = [
                path
                for path in part_files(settings.uri, settings.publication)
                if f"/part-{token}-" in path
            ]
            remove(settings.uri, mine)
        except (OSError, ArchiveError) as error:
            log.warning("could not remove the files of a failed attempt: %s", error)


def _rows_between(
    conn: psycopg.Connection[Any], publication: str, after: Position, until: Position
) -> int:
    row = conn.execute(
        spark_queries()["spark_range_rows"],
        {
            "publication": publication,
            **after.query_parameters("after_"),
            **until.query_parameters("until_"),
        },
    ).fetchone()
    assert row is not None  # count(*) returns a row
    return int(row[0])


def _check(archived: ArchivedRange, slices: int, rows: int, end: Position) -> None:
    """Every slice wrote its rows, and the files hold the range exactly."""
    written = {file.slice for file in archived.files}
    if written != set(range(slices)) or archived.rows != rows or archived.last != end:
        raise ArchiveError(
            f"the files written for ({archived.after}, {end}] hold {archived.rows} messages up"
            f" to {archived.last} from slices {sorted(written)}; the range has {rows} in"
            f" {slices} slices: nothing was recorded"
        )


_ERROR_LINE = re.compile(r"^\s*((?:[\w]+\.)*\w*(?:Error|Exception)): (.+)$", re.MULTILINE)


def task_failure(error: BaseException) -> str:
    """The line that says why a task failed, out of Spark's report (a Java exception holding
    the Python worker's traceback): the archive's own error if one was raised, else the last
    Python error line."""
    text: str = str(error)
    lines: list[tuple[str, str]] = _ERROR_LINE.findall(text)
    ours = [message for name, message in lines if name.startswith("outbox.")]
    if ours:
        return ours[-1]
    python = [f"{name.rsplit('.', 1)[-1]}: {message}" for name, message in lines]
    return python[-1] if python else text.splitlines()[0] if text else type(error).__name__
