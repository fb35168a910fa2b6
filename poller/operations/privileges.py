"""What the role a front end connects as may do, read from the database's privileges (never
from a flag: a console started as outbox_reader must not offer what it cannot do)."""

from typing import Any, NamedTuple

import psycopg

from poller.store.operator_store import OperatorStore


class Privileges(NamedTuple):
    role: str
    database: str
    """The database connected to (blocking sessions of others belong to other tenants)."""
    reads_messages: bool
    """May read messages: their data, headers, and the errors parked with them."""
    acts: bool
    """May seek, skip, replay and purge (UPDATE on the subscriptions and their shards,
    UPDATE and DELETE on parked messages): the schema's owner, not outbox_poller or
    outbox_reader."""


def privileges(conn: psycopg.Connection[Any]) -> Privileges:
    role, database, reads_messages, acts = OperatorStore(conn).privileges()
    return Privileges(role, database, reads_messages, acts and reads_messages)
