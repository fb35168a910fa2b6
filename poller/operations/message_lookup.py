"""One message of a publication found by its id or its place, in the table or, once retention
dropped it, in the publication's archive; and a publication's messages deleted."""

from typing import Any

import psycopg

from outbox.positions import Position
from poller.message import Message
from poller.operations.refusals import NotFoundError, quoted
from poller.store.admin_store import AdminStore
from poller.store.archived_reads import find_archived
from poller.store.message_reads import message_from_row


def find_message(
    conn: psycopg.Connection[Any],
    publication: str,
    *,
    message_id: str | None = None,
    at: Position | int | None = None,
) -> Message:
    """One message by its id or by its place: TX:POS, or POS alone (exactly one of the two)."""
    store = AdminStore(conn)
    if "\x00" in publication + (message_id or ""):
        row = None
    elif message_id is not None:
        row = store.message_by_id(publication, message_id)
    elif isinstance(at, int):
        row = store.message_by_position(publication, at)
    else:
        assert at is not None
        row = store.message_at(publication, at)
    if row is not None:
        return message_from_row(row)
    # Retention may have dropped it: an archived publication's archive has it then.
    archived = None
    if "\x00" not in publication + (message_id or ""):
        archived = find_archived(
            conn,
            publication,
            message_id=message_id,
            position=at if isinstance(at, int) else None,
            at=at if isinstance(at, Position) else None,
        )
    if archived is None:
        wanted = f"id {quoted(message_id)}" if message_id is not None else f"at {at}"
        raise NotFoundError(f"publication {quoted(publication)} has no message {wanted}")
    return archived


def delete_publication_messages(conn: psycopg.Connection[Any], publication: str) -> int:
    return AdminStore(conn).delete_publication_messages(publication)
