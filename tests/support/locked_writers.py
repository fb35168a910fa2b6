"""Two writers of one account serialised by a row lock, the later committer holding the older
transaction id: the interleaving that delivered messages out of commit order.

    T1: INSERT INTO audit ...             -- T1 takes its xid first
    T2: UPDATE accounts ... WHERE id = K  -- T2 takes a newer xid and locks the account
    T1: UPDATE accounts ... WHERE id = K  -- waits for T2
    T2: append "First";  COMMIT
    T1: append "Second"; COMMIT           -- committed after T2, yet its xid is older

Ordered by the writers' own xids, "Second" came first. The helper checks that premise (the
writers' xids, read inside each transaction, are in the other order), so a test using it
shows the interleaving happened, and it waits for T1 to block on the lock through pg_locks
rather than sleeping. Each write path an application has goes through the same interleaving:
psycopg's append (with a message id: the SQL function; without: the plain INSERT),
append_many, their async twins on an AsyncConnection, and a SQLAlchemy Session.
"""

import asyncio
import threading
import time
from dataclasses import dataclass
from typing import Any, Protocol

import psycopg
from sqlalchemy import create_engine, text
from sqlalchemy.orm import Session
from sqlalchemy.pool import NullPool

import outbox
from outbox.positions import Position
from tests.support.databases import probe

TABLES = """
CREATE TABLE IF NOT EXISTS locked_writers_audit (note text NOT NULL);
CREATE TABLE IF NOT EXISTS locked_writers_accounts (id text PRIMARY KEY, sequence int NOT NULL);
"""
AUDIT = "INSERT INTO locked_writers_audit VALUES ('written before the lock')"
LOCK = "UPDATE locked_writers_accounts SET sequence = sequence + 1 WHERE id = %(key)s"
OWN_XID = "SELECT pg_current_xact_id()::text::bigint"


class Writer(Protocol):
    """One writer's transaction, driven a statement at a time."""

    pid: int

    def execute(self, statement: str, key: str) -> None: ...
    def own_xid(self) -> int: ...
    def append(
        self, publication: str, message_type: str, key: str, message_id: str | None
    ) -> int: ...
    def commit(self) -> None: ...
    def close(self) -> None: ...


def _psycopg_statement(statement: str, key: str) -> tuple[Any, list[str]]:
    if "%(key)s" in statement:
        return statement.replace("%(key)s", "%s"), [key]
    return statement, []


class PsycopgWriter:
    def __init__(self, url: str, path: str, isolation: psycopg.IsolationLevel | None) -> None:
        self.conn = psycopg.connect(url)
        if isolation is not None:
            self.conn.isolation_level = isolation
        self.path = path
        self.pid = self.conn.info.backend_pid

    def execute(self, statement: str, key: str) -> None:
        self.conn.execute(*_psycopg_statement(statement, key))

    def own_xid(self) -> int:
        row = self.conn.execute(OWN_XID).fetchone()
        assert row is not None
        return int(row[0])

    def append(self, publication: str, message_type: str, key: str, message_id: str | None) -> int:
        data = {"type": message_type}
        if self.path == "append_many":
            message = outbox.NewMessage(
                message_type, data, partition_key=key, message_id=message_id
            )
            return outbox.append_many(self.conn, publication, [message])[0]
        return outbox.append(
            self.conn, publication, message_type, data, partition_key=key, message_id=message_id
        )

    def commit(self) -> None:
        self.conn.commit()

    def close(self) -> None:
        self.conn.close()


class AsyncPsycopgWriter:
    """An AsyncConnection on a loop of its own, run by whichever thread drives this writer
    (one at a time), so the interleaving is scripted exactly as for the sync paths."""

    def __init__(self, url: str, path: str, isolation: psycopg.IsolationLevel | None) -> None:
        self.loop = asyncio.new_event_loop()
        self.conn = self.loop.run_until_complete(psycopg.AsyncConnection.connect(url))
        if isolation is not None:
            self.loop.run_until_complete(self.conn.set_isolation_level(isolation))
        self.path = path
        self.pid = self.conn.info.backend_pid

    def execute(self, statement: str, key: str) -> None:
        self.loop.run_until_complete(self.conn.execute(*_psycopg_statement(statement, key)))

    def own_xid(self) -> int:
        async def read() -> int:
            row = await (await self.conn.execute(OWN_XID)).fetchone()
            assert row is not None
            return int(row[0])

        return self.loop.run_until_complete(read())

    def append(self, publication: str, message_type: str, key: str, message_id: str | None) -> int:
        data = {"type": message_type}
        if self.path == "append_many_async":
            message = outbox.NewMessage(
                message_type, data, partition_key=key, message_id=message_id
            )
            many = outbox.append_many_async(self.conn, publication, [message])
            return self.loop.run_until_complete(many)[0]
        one = outbox.append_async(
            self.conn, publication, message_type, data, partition_key=key, message_id=message_id
        )
        return self.loop.run_until_complete(one)

    def commit(self) -> None:
        self.loop.run_until_complete(self.conn.commit())

    def close(self) -> None:
        self.loop.run_until_complete(self.conn.close())
        self.loop.close()


class SqlAlchemyWriter:
    def __init__(self, url: str, path: str, isolation: psycopg.IsolationLevel | None) -> None:
        del path, isolation  # READ COMMITTED, the only path the isolation tests do not take
        self.engine = create_engine(
            "postgresql+psycopg://", creator=lambda: psycopg.connect(url), poolclass=NullPool
        )
        self.session = Session(self.engine)
        raw = self.session.connection().connection.driver_connection
        assert isinstance(raw, psycopg.Connection)
        self.pid = raw.info.backend_pid

    def execute(self, statement: str, key: str) -> None:
        self.session.execute(text(statement.replace("%(key)s", ":key")), {"key": key})

    def own_xid(self) -> int:
        return int(self.session.execute(text(OWN_XID)).scalar_one())

    def append(self, publication: str, message_type: str, key: str, message_id: str | None) -> int:
        data = {"type": message_type}
        return outbox.append(
            self.session, publication, message_type, data, partition_key=key, message_id=message_id
        )

    def commit(self) -> None:
        self.session.commit()

    def close(self) -> None:
        self.session.close()
        self.engine.dispose()


WRITE_PATHS: dict[str, Any] = {
    "append": PsycopgWriter,
    "append with message_id": PsycopgWriter,
    "append_many": PsycopgWriter,
    "append_async": AsyncPsycopgWriter,
    "append_many_async": AsyncPsycopgWriter,
    "sqlalchemy session": SqlAlchemyWriter,
}


@dataclass(frozen=True)
class LockedPair:
    """The two messages, each at the place it is delivered in (transaction_id, position), and
    the writers' own xids (older: the one that committed second)."""

    first: Position
    second: Position
    first_id: str
    second_id: str
    key: str
    older_xid: int
    newer_xid: int

    @property
    def message_ids(self) -> list[str]:
        """In commit order: what every reader must deliver."""
        return [self.first_id, self.second_id]


def _wait_until_blocked(url: str, pid: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        row = (
            probe(url)
            .execute("SELECT EXISTS (SELECT FROM pg_locks WHERE pid = %s AND NOT granted)", [pid])
            .fetchone()
        )
        if row is not None and row[0]:
            return
        assert time.monotonic() < deadline, "the older writer never waited for the row lock"
        time.sleep(0.005)


def _stored(url: str, position: int) -> tuple[Position, str]:
    row = (
        probe(url)
        .execute(
            "SELECT transaction_id::text::bigint, message_id FROM outbox.messages"
            " WHERE position = %s",
            [position],
        )
        .fetchone()
    )
    assert row is not None
    return Position(int(row[0]), position), str(row[1])


def append_through_a_row_lock(
    url: str,
    publication: str = "orders",
    key: str = "account-1",
    path: str = "append with message_id",
    isolation: psycopg.IsolationLevel | None = None,
    tag: str = "",
) -> LockedPair:
    """Run the interleaving once through `path`; `tag` keeps message ids unique when called
    again in one database."""
    with psycopg.connect(url, autocommit=True) as setup:
        setup.execute(TABLES)
        setup.execute(
            "INSERT INTO locked_writers_accounts VALUES (%s, 0) ON CONFLICT DO NOTHING", [key]
        )

    def ids(name: str) -> str | None:
        """The SQL function takes an id the caller gives; the plain INSERT makes a fresh one."""
        return f"{name}{tag}" if path == "append with message_id" else None

    make = WRITE_PATHS[path]
    older: Writer = make(url, path, isolation)
    newer: Writer = make(url, path, isolation)
    try:
        older.execute(AUDIT, key)
        older_xid = older.own_xid()
        newer.execute(LOCK, key)
        newer_xid = newer.own_xid()
        assert older_xid < newer_xid, (older_xid, newer_xid)
        appended: dict[str, int] = {}
        failure: list[BaseException] = []

        def older_writer() -> None:
            try:
                older.execute(LOCK, key)
                appended["second"] = older.append(publication, "Second", key, ids("second"))
                older.commit()
            except BaseException as error:  # raised again in the test's thread
                failure.append(error)

        thread = threading.Thread(target=older_writer, name="older-writer")
        thread.start()
        _wait_until_blocked(url, older.pid)
        appended["first"] = newer.append(publication, "First", key, ids("first"))
        newer.commit()
        thread.join(timeout=30)
        assert not thread.is_alive(), "the older writer did not finish"
        if failure:
            raise failure[0]
    finally:
        older.close()
        newer.close()
    first, first_id = _stored(url, appended["first"])
    second, second_id = _stored(url, appended["second"])
    return LockedPair(first, second, first_id, second_id, key, older_xid, newer_xid)
