"""The archive's catalog in the database: `outbox.archives` and `outbox.archived_ranges`.

The database says what the archive is: a range is part of it exactly when its row has
committed, in the statement that moves the archive's mark (`commit_range`), so a reader that
finds a range finds every file of it complete, and a job killed while writing leaves nothing
a reader could see. Readers find an archive's location and format here, with no setting of
their own. Sync for the job and the operator's commands, async for the daemon and catch-up
subscriptions: each pair runs one named statement and shares the parsing of its rows.
"""

import json
from functools import cache
from typing import Any, LiteralString

import psycopg
from psycopg.types.json import Jsonb

from outbox.archive.layout import FORMAT_VERSION, Archive, ArchivedFile, ArchivedRange
from outbox.positions import Position


@cache
def archive_queries() -> dict[str, LiteralString]:
    from outbox.queries import load_queries

    return load_queries("archive_queries.sql")


def _archive(row: tuple[Any, ...]) -> Archive:
    publication, uri, version, begins_tx, begins_pos, mark_tx, mark_pos, archived_at = row
    return Archive(
        publication=publication,
        uri=uri,
        format_version=version,
        begins_after=Position(begins_tx, begins_pos),
        mark=Position(mark_tx, mark_pos),
        archived_at=archived_at,
    )


def _range(publication: str, row: tuple[Any, ...]) -> ArchivedRange:
    (after_tx, after_pos, first_tx, first_pos, last_tx, last_pos) = row[:6]
    uri, version, rows, size, checksum, files = row[6:]
    listed = json.loads(files) if isinstance(files, str) else files
    return ArchivedRange(
        publication=publication,
        after=Position(after_tx, after_pos),
        first=Position(first_tx, first_pos),
        last=Position(last_tx, last_pos),
        uri=uri,
        format_version=version,
        rows=rows,
        bytes=size,
        checksum=checksum,
        files=tuple(ArchivedFile.from_json(file) for file in listed),
    )


def _ranges_parameters(publication: str, after: Position, limit: int) -> dict[str, Any]:
    return {"publication": publication, **after.query_parameters("after_"), "limit": limit}


# Reads --------------------------------------------------------------------------------------


def archive_of(conn: psycopg.Connection[Any], publication: str) -> Archive | None:
    row = conn.execute(
        archive_queries()["archive_of_publication"], {"publication": publication}
    ).fetchone()
    return None if row is None else _archive(row)


async def archive_of_async(conn: psycopg.AsyncConnection[Any], publication: str) -> Archive | None:
    cursor = await conn.execute(
        archive_queries()["archive_of_publication"], {"publication": publication}
    )
    row = await cursor.fetchone()
    return None if row is None else _archive(row)


def list_archives(conn: psycopg.Connection[Any]) -> list[Archive]:
    return [_archive(row) for row in conn.execute(archive_queries()["list_archives"])]


def ranges_after(
    conn: psycopg.Connection[Any], publication: str, after: Position, limit: int
) -> list[ArchivedRange]:
    """The ranges holding messages after `after`, in delivery order, at most `limit`."""
    rows = conn.execute(
        archive_queries()["archived_ranges_after"], _ranges_parameters(publication, after, limit)
    ).fetchall()
    return [_range(publication, row) for row in rows]


async def ranges_after_async(
    conn: psycopg.AsyncConnection[Any], publication: str, after: Position, limit: int
) -> list[ArchivedRange]:
    cursor = await conn.execute(
        archive_queries()["archived_ranges_after"], _ranges_parameters(publication, after, limit)
    )
    return [_range(publication, row) for row in await cursor.fetchall()]


def ranges_in_table(conn: psycopg.Connection[Any]) -> list[ArchivedRange]:
    """Every archive's ranges that end after their publication's retired-up-to mark: some of
    their messages are still in outbox.messages, for retention to drop."""
    rows = conn.execute(archive_queries()["archived_ranges_in_table"]).fetchall()
    return [_range(row[0], row[1:]) for row in rows]


def archive_lag(conn: psycopg.Connection[Any]) -> list[tuple[str, int, float]]:
    """Per archive: its publication, the messages not archived yet, and the oldest one's age
    in seconds (0.0 when none)."""
    return [
        (name, int(behind), float(age))
        for name, behind, age in conn.execute(archive_queries()["archive_lag"])
    ]


# Writes (the archive job and the operator's deletion) -----------------------------------------


def begin_archive(conn: psycopg.Connection[Any], publication: str, uri: str) -> Archive:
    """The publication's archive, recorded now (at `uri`, beginning after its retired-up-to
    mark) if it was not already. In a transaction of its own, holding retention's drop off
    while it reads the mark (the statement lock_messages_against_retirement)."""
    from outbox.queries import QUERIES

    with conn.transaction():
        conn.execute(QUERIES["lock_messages_against_retirement"])
        conn.execute(
            archive_queries()["begin_archive"],
            {"publication": publication, "uri": uri, "format_version": FORMAT_VERSION},
        )
        archive = archive_of(conn, publication)
    assert archive is not None  # inserted, or there already
    return archive


def commit_range(conn: psycopg.Connection[Any], archived: ArchivedRange) -> bool:
    """Record `archived` and move the archive's mark to its last message, in one statement;
    False (nothing written) unless the mark is at the range's start, the archive still at its
    URI in its format."""
    parameters = {
        "publication": archived.publication,
        **archived.after.query_parameters("after_"),
        **archived.first.query_parameters("first_"),
        **archived.last.query_parameters("last_"),
        "uri": archived.uri,
        "format_version": archived.format_version,
        "rows": archived.rows,
        "bytes": archived.bytes,
        "checksum": archived.checksum,
        "files": Jsonb([file.to_json() for file in archived.files]),
    }
    with conn.transaction():
        row = conn.execute(archive_queries()["archive_commit_range"], parameters).fetchone()
    return row is not None


def try_lock(conn: psycopg.Connection[Any], publication: str) -> bool:
    """The publication's archive lock, for this session (keep the connection while writing:
    the lock goes with it). A session lock, not a transaction: the job holds no transaction,
    hence no xid, that would hold back every reader's safe frontier while Spark writes."""
    row = conn.execute(
        archive_queries()["try_archive_lock"], {"publication": publication}
    ).fetchone()
    return bool(row and row[0])


def release_lock(conn: psycopg.Connection[Any], publication: str) -> None:
    conn.execute(archive_queries()["release_archive_lock"], {"publication": publication})


def lock_holder(conn: psycopg.Connection[Any], publication: str) -> str | None:
    """Who holds the publication's archive lock, in words (None: nobody now, or hidden)."""
    row = conn.execute(
        archive_queries()["archive_lock_holder"], {"publication": publication}
    ).fetchone()
    if row is None:
        return None
    pid, application, client, since = row
    where = f" from {client}" if client else ""
    who = application or "no application name"
    return f"pid {pid} ({who}{where}, since {since:%Y-%m-%d %H:%M:%S%z})"


def delete_archive(conn: psycopg.Connection[Any], publication: str) -> str | None:
    """Forget the publication's archive (its files stay: the caller removes them); where its
    files are, or None if it had none."""
    with conn.transaction():
        row = conn.execute(
            archive_queries()["delete_archive"], {"publication": publication}
        ).fetchone()
    return None if row is None else str(row[0])
