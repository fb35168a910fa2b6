"""Archives as operators see them: where each publication's archive stands, and deleting one
for good (`outbox status`, `outbox archive delete`)."""

import datetime
from dataclasses import dataclass
from typing import Any

import psycopg

from outbox.archive import catalog
from outbox.archive.errors import ArchiveError, ArchiveRefusedError
from outbox.archive.layout import publication_directory
from outbox.positions import Position
from poller.operations.refusals import SubscriptionError, quoted


@dataclass(frozen=True)
class ArchiveStatus:
    publication: str
    uri: str
    format_version: int
    begins_after: Position
    archived_to: Position
    """The last message archived (the archive's beginning while none is)."""
    archived_at: datetime.datetime | None
    messages_behind: int
    """The publication's messages not archived yet (after `archived_to`)."""
    oldest_behind_seconds: float
    """How long ago the oldest of them was appended (0.0 when none is)."""


def archives(conn: psycopg.Connection[Any]) -> list[ArchiveStatus]:
    lag = {publication: (behind, age) for publication, behind, age in catalog.archive_lag(conn)}
    return [
        ArchiveStatus(
            archive.publication,
            archive.uri,
            archive.format_version,
            archive.begins_after,
            archive.mark,
            archive.archived_at,
            *lag.get(archive.publication, (0, 0.0)),
        )
        for archive in catalog.list_archives(conn)
    ]


def delete_archive(conn: psycopg.Connection[Any], publication: str) -> str:
    """Delete the publication's archive for good: its catalog rows, then its files (the
    directory `URI/publication=P`). Returns the URI. Under the archive's lock, so no job
    writes meanwhile; retention stops waiting for it at once. `conn` is in autocommit mode.

    The rows go first: from their commit no reader uses the files, and a failure to remove
    the files leaves nothing half-visible (the error names the directory to remove)."""
    # Before anything is deleted: without pyarrow (the archive extra) the files would stay.
    from outbox.archive.files import remove_publication

    if not catalog.try_lock(conn, publication):
        holder = catalog.lock_holder(conn, publication) or "its session is hidden from you"
        raise ArchiveRefusedError(
            f"an archive job writes the archive of {quoted(publication)} now ({holder}); stop"
            " it first"
        )
    try:
        uri = catalog.delete_archive(conn, publication)
        if uri is None:
            raise SubscriptionError(f"publication {quoted(publication)} has no archive")
        try:
            remove_publication(uri, publication)
        except (OSError, ArchiveError) as error:
            raise ArchiveError(
                f"the archive of {quoted(publication)} is deleted from the database, but its"
                f" files under {uri} could not be removed ({error}): remove"
                f" {uri.rstrip('/')}/{publication_directory(publication)} by hand"
            ) from None
        return uri
    finally:
        catalog.release_lock(conn, publication)
