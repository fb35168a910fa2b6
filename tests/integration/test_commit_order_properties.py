"""The ordering rule against a reference model of its promise, on a real PostgreSQL.

Hypothesis draws schedules of four writer sessions, each step one statement: a write that
takes the session's xid, an append (with one of two keys or none), a commit, a rollback, and
polls of a snapshot-safe reader paging from its own checkpoint. Some sessions run under
REPEATABLE READ. The steps run one after another on real connections, so the schedule decides
every snapshot, xid and commit. Then every writer ends and the reader reads to the frontier.

The reference model is the promise, worked out from the schedule alone:
- exactly the committed messages are delivered, each once (no loss under any commit order,
  no rolled-back message), although the reader polled while transactions were open;
- if A's transaction committed before B's transaction could see it, A is delivered before B:
  under READ COMMITTED "could see" is the append statement's start, under REPEATABLE READ the
  transaction's first statement or, if later, the statement that gave it its xid (an xid
  taken after A's commit is above every id A's message can carry);
- one transaction's messages come in the order it appended them.
Ordered by the writers' own xids, the second rule failed within a few examples.
"""

import uuid
from dataclasses import dataclass, field
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import outbox
from outbox.positions import Position
from poller.store.message_reads import prepare_reader, read_batch
from tests.support.daemons import wait_until

SESSIONS = 3
REPEATABLE_READ_SESSIONS = {2}
KEYS = ["a", "b", None]

Step = tuple[str, int, int]
# Appends, commits and writes drawn more often than reads and rollbacks: an inversion needs a
# write, another session's append and commit, then the first one's append, in that order.
ACTIONS = ["write", "append", "append", "commit", "commit", "rollback", "read"]
steps = st.lists(
    st.tuples(
        st.sampled_from(ACTIONS), st.integers(0, SESSIONS - 1), st.integers(0, len(KEYS) - 1)
    ),
    min_size=4,
    max_size=40,
)
# The row-lock interleaving (tests/support/locked_writers.py) without the lock, and its
# REPEATABLE READ twin, whose writer takes its xid only after the other committed.
LOCKED_WRITERS = [("write", 0, 0), ("append", 1, 0), ("commit", 1, 0), ("append", 0, 0)]
REPEATABLE_READ = [("read", 0, 0), ("append", 2, 1), ("commit", 2, 0), ("append", 1, 1),
                   ("commit", 1, 0), ("write", 2, 0), ("append", 2, 1)]  # fmt: skip


@dataclass
class Transaction:
    """What the model knows of one writer transaction: steps are indexes into the schedule."""

    repeatable_read: bool
    first_statement: int | None = None
    xid_taken: int | None = None
    appended: list[tuple[str, int]] = field(default_factory=list)  # (message id, step)
    committed: int | None = None

    def saw_commits_before(self, append_step: int) -> int:
        """The step before which a commit is visible to an append at `append_step` (or
        ordered before it by the xid rule)."""
        if not self.repeatable_read:
            return append_step
        assert self.first_statement is not None
        xid_step = self.xid_taken if self.xid_taken is not None else append_step
        return max(self.first_statement, xid_step)


class Schedule:
    def __init__(self, url: str, publication: str) -> None:
        self.url = url
        self.publication = publication
        self.sessions: list[psycopg.Connection[Any]] = []
        for number in range(SESSIONS):
            conn = psycopg.connect(url)
            if number in REPEATABLE_READ_SESSIONS:
                conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
            self.sessions.append(conn)
        self.open: dict[int, Transaction] = {}
        self.ended: list[Transaction] = []
        self.reader = psycopg.connect(url, autocommit=True)
        prepare_reader(self.reader)
        self.checkpoint = Position(0, 0)
        self.delivered: list[str] = []

    def transaction(self, session: int, step: int) -> Transaction:
        if session not in self.open:
            self.open[session] = Transaction(session in REPEATABLE_READ_SESSIONS, step)
        return self.open[session]

    def run(self, step: int, action: str, session: int, key: int) -> None:
        conn = self.sessions[session]
        if action == "read":
            self.read()
        elif action == "write":
            transaction = self.transaction(session, step)
            conn.execute("INSERT INTO order_noise VALUES (1)")
            if transaction.xid_taken is None:
                transaction.xid_taken = step
        elif action == "append":
            transaction = self.transaction(session, step)
            message_id = str(uuid.uuid4())
            outbox.append(conn, self.publication, "T", {}, partition_key=KEYS[key],
                          message_id=message_id)  # fmt: skip
            transaction.appended.append((message_id, step))
            if transaction.xid_taken is None:
                transaction.xid_taken = step
        elif session in self.open:
            transaction = self.open.pop(session)
            if action == "commit":
                conn.commit()
                transaction.committed = step
                self.ended.append(transaction)
            else:
                conn.rollback()

    def read(self) -> list[str]:
        messages = read_batch(self.reader, self.publication, self.checkpoint, 1000)
        if messages:
            self.checkpoint = messages[-1].at
        self.delivered += [message.message_id for message in messages]
        return [message.message_id for message in messages]

    def finish(self, steps: int) -> None:
        for session in list(self.open):
            self.run(steps, "commit", session, 0)
        wait_until(
            lambda: (
                self.reader.execute(
                    "SELECT pg_snapshot_xmin(pg_current_snapshot())"
                    " > coalesce((SELECT max(transaction_id) FROM outbox.messages), '0')"
                ).fetchone()
                == (True,)
            ),
            timeout=60,
            what="the safe frontier to pass every message written",
        )
        while self.read():
            pass

    def close(self) -> None:
        for conn in [*self.sessions, self.reader]:
            conn.close()


def check_the_promise(schedule: Schedule) -> None:
    committed = [t for t in schedule.ended if t.committed is not None]
    expected = {message_id for t in committed for message_id, _ in t.appended}
    assert len(schedule.delivered) == len(set(schedule.delivered)), "a message came twice"
    assert set(schedule.delivered) == expected, "lost, or rolled back yet delivered"
    order = {message_id: index for index, message_id in enumerate(schedule.delivered)}
    for earlier in committed:
        assert earlier.committed is not None
        for later in committed:
            for later_id, append_step in later.appended:
                if later is earlier:
                    continue
                if earlier.committed < later.saw_commits_before(append_step):
                    for earlier_id, _ in earlier.appended:
                        assert order[earlier_id] < order[later_id], (
                            f"{later_id} (appended at step {append_step}) came before"
                            f" {earlier_id}, whose transaction committed at step"
                            f" {earlier.committed}"
                        )
        ids = [message_id for message_id, _ in earlier.appended]
        assert [order[i] for i in ids] == sorted(order[i] for i in ids)


@pytest.fixture
def noise_table(database_url: str) -> str:
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE order_noise (n int)")
    return database_url


@settings(
    max_examples=80,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@example(schedule_steps=LOCKED_WRITERS)
@example(schedule_steps=REPEATABLE_READ)
@given(schedule_steps=steps)
def test_any_schedule_delivers_every_commit_once_in_commit_order(
    noise_table: str, schedule_steps: list[Step]
) -> None:
    schedule = Schedule(noise_table, f"p-{uuid.uuid4().hex[:12]}")
    try:
        for step, (action, session, key) in enumerate(schedule_steps):
            schedule.run(step, action, session, key)
        schedule.finish(len(schedule_steps))
    finally:
        schedule.close()
    check_the_promise(schedule)
