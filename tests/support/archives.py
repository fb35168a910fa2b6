"""Archives for the readers' tests, written without Spark: the same files (outbox.archive.files)
and catalog rows (outbox.archive.catalog) the Spark job writes, so a reader's test needs no
JVM. The job itself is tested in tests/integration/spark/test_archive_job.py."""

import secrets
from pathlib import Path
from typing import Any

import psycopg
import pyarrow as pa
import pyarrow.compute as pc

from outbox.archive import catalog
from outbox.archive.files import ARCHIVE_SCHEMA, DELIVERY_ORDER, encode, store
from outbox.archive.layout import ArchivedFile, ArchivedRange, file_path, range_of
from outbox.positions import Position
from poller.store.message_reads import read_batch


def archive_ranges(
    url: str,
    publication: str,
    uri: str,
    *,
    rows_per_range: int,
    rows_per_file: int | None = None,
    ranges: int | None = None,
) -> list[ArchivedRange]:
    """Archive the publication's safe messages not archived yet, `rows_per_range` a range
    (at most `ranges` of them), each cut into files of `rows_per_file`."""
    done: list[ArchivedRange] = []
    with psycopg.connect(url, autocommit=True) as conn:
        archive = catalog.begin_archive(conn, publication, uri)
        after = archive.mark
        while ranges is None or len(done) < ranges:
            messages = read_batch(conn, publication, after, rows_per_range)
            if not messages:
                break
            table = pa.table(
                {
                    "position": [m.position for m in messages],
                    "transaction_id": [m.transaction_id for m in messages],
                    "message_id": [m.message_id for m in messages],
                    "message_type": [m.message_type for m in messages],
                    "partition_key": [m.partition_key for m in messages],
                    "data": [m.data_text for m in messages],
                    "headers": [m.headers_text for m in messages],
                    "appended_at": [m.appended_at for m in messages],
                },
                schema=ARCHIVE_SCHEMA,
            ).sort_by(DELIVERY_ORDER)
            size = rows_per_file or table.num_rows
            token = secrets.token_hex(4)
            files = [
                file
                for index, start in enumerate(range(0, table.num_rows, size))
                for file in _write_slice(table.slice(start, size), publication, uri, token, index)
            ]
            archived = range_of(files, publication, after, uri)
            assert catalog.commit_range(conn, archived)
            done.append(archived)
            after = archived.last
    return done


def _write_slice(
    rows: pa.Table, publication: str, uri: str, token: str, index: int
) -> list[ArchivedFile]:
    days = pc.cast(rows.column("appended_at"), pa.date32())
    written = []
    for day in pc.unique(days).to_pylist():
        of_day = rows.filter(pc.equal(days, pa.scalar(day, pa.date32())))
        path = file_path(publication, day, token, index, 0)
        data = encode(of_day, publication)
        written.append(
            ArchivedFile(
                path=path,
                slice=index,
                rows=of_day.num_rows,
                bytes=data.size,
                sha256=store(uri, path, data),
                first=_at(of_day, 0),
                last=_at(of_day, of_day.num_rows - 1),
            )
        )
    return written


def _at(rows: pa.Table, index: int) -> Position:
    return Position(
        rows.column("transaction_id")[index].as_py(), rows.column("position")[index].as_py()
    )


def archived_files(directory: Path) -> list[Path]:
    return sorted(directory.rglob("part-*.parquet"))


def catalog_rows(conn: psycopg.Connection[Any], publication: str) -> list[tuple[Any, ...]]:
    """The ranges as stored: (after, last, rows) per range, in order."""
    return conn.execute(
        "SELECT after_position, last_position, rows FROM outbox.archived_ranges"
        " WHERE publication_id = %s ORDER BY last_transaction_id, last_position",
        (publication,),
    ).fetchall()
