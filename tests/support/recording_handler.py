"""A handler for the daemon tests: every delivery becomes a row of the table `handled`.

The daemon under test loads it with `--handler tests.support.recording_handler:record`. Each
call inserts (position, transaction_id, pid, clock_timestamp()) into `handled`, in the same
database (OUTBOX_DATABASE_URL), on its own autocommit connection: the row is durable before
the handler returns, so it is there even when the daemon is killed a moment later. `handled`
has no primary key, so a message delivered twice shows up twice. The test creates the table
(tests.support.daemons.create_handled_table).
"""

import os
import random
import sys
import threading
import time
from typing import Any

import psycopg

from poller.message import Message

# Not `outbox-poller:...`: tests terminate the daemon's own sessions by that prefix, and this
# connection must survive them.
APPLICATION_NAME = "outbox-test-handler"

INSERT = (
    "INSERT INTO handled (position, transaction_id, pid, handled_at)"
    " VALUES (%s, %s, %s, clock_timestamp())"
)

_local = threading.local()


def thread_connection() -> psycopg.Connection[Any]:
    """This thread's connection for handlers, opened on first use and again after it broke."""
    conn: psycopg.Connection[Any] | None = getattr(_local, "conn", None)
    if conn is None or conn.closed:
        conn = psycopg.connect(
            os.environ["OUTBOX_DATABASE_URL"], autocommit=True, application_name=APPLICATION_NAME
        )
        _local.conn = conn
    return conn


def record(message: Message) -> None:
    """Record the delivery; a failure raises, so the daemon retries the message."""
    thread_connection().execute(INSERT, (message.position, message.transaction_id, os.getpid()))


def record_slowly(message: Message) -> None:
    """Like `record`, after 2 to 6 ms of work: widens the windows in which faults land."""
    time.sleep(random.uniform(0.002, 0.006))
    record(message)


def record_unless_hostile(message: Message) -> None:
    """`record`, except for message types that act out what a careless handler does."""
    if message.message_type == "RaisesNul":
        # PostgreSQL text cannot hold NUL; the daemon must still be able to park this.
        raise ValueError("bad\x00byte " + "x" * 100_000)
    if message.message_type == "CallsExit":
        sys.exit(3)
    record(message)
    if message.message_type == "Blocks":
        time.sleep(600)  # recorded first, so the test knows the handler started


class UnprintableError(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no text")


class HandlersOwnBaseError(BaseException):
    """Neither Exception, SystemExit nor KeyboardInterrupt."""


async def record_unless_hostile_async(message: Message) -> None:
    """An `async def` handler raising what once hung, stalled or ended the daemon."""
    if message.message_type == "RaisesUnprintable":
        raise UnprintableError
    if message.message_type == "RaisesBaseException":
        raise HandlersOwnBaseError("its own")
    if message.message_type == "RaisesKeyboardInterrupt":
        raise KeyboardInterrupt
    record(message)
